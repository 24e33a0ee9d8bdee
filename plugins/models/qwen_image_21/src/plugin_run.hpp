// The plugin's job: read the resolved settings, load the checkpoint, denoise, decode, write the PNG, and record
// phases, routes and counters in the run report.
#pragma once

#include <functional>
#include <string>

#include "ddo/run_context.hpp"

namespace ddo::qwen_image_21 {

using LogFn = std::function<void(int level, const std::string & message)>;
void run_plugin(RunContext & ctx, const LogFn & log);

}  // namespace ddo::qwen_image_21
