// The ltx2_video run: workload and options -> phases (connectors, denoise, decode, write) on the model kit.
#pragma once

#include "ddo/model/model_run.hpp"

namespace ddo::ltx2 {

inline constexpr const char * kLtx2VideoVersion = "0.1.0";  // the plugin's version (plugin.cpp; latents files)

void run_ltx2_video(model::ModelRun & run);

}  // namespace ddo::ltx2
