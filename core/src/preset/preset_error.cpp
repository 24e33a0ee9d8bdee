#include "ddo/preset/preset_resolver.hpp"

namespace ddo {

namespace {
std::string format_preset_error(const std::string & file, int line, int column, const std::string & problem,
                                const std::string & hint) {
    std::string s = file;
    if (line > 0) s += ":" + std::to_string(line) + ":" + std::to_string(column);
    s += ": " + problem;
    if (!hint.empty()) s += "; " + hint;
    return s;
}
}  // namespace

PresetError::PresetError(std::string file, int line, int column, std::string problem, std::string hint)
    : UsageError(format_preset_error(file, line, column, problem, hint)),
      file_(std::move(file)),
      line_(line),
      column_(column),
      problem_(std::move(problem)),
      hint_(std::move(hint)) {}

}  // namespace ddo
