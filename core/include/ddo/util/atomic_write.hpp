// Atomic file replacement (Note [Atomic report write] in core/src/report/atomic_write.cpp): a reader or a crash
// sees the previous file or the new one, never a torn one. Reports, manifests.
#pragma once

#include <filesystem>
#include <string>

namespace ddo {

// Writes `text` to a temp file beside `path`, fsyncs it, renames it over `path` (mode 0644), fsyncs the directory.
// `what` names the file in errors ("report", "artifact manifest"). Throws RuntimeError naming the path.
void write_text_atomically(const std::filesystem::path & path, const std::string & text, const std::string & what);

}  // namespace ddo
