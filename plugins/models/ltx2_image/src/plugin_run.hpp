// The ltx2_image run: workload and options -> phases (connectors, denoise, decode, write) on the model kit.
#pragma once

#include "ddo/model/model_run.hpp"

namespace ddo::ltx2 {

void run_ltx2_image(model::ModelRun & run);

}  // namespace ddo::ltx2
