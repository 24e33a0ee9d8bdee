// The ltx2_image run: workload and options -> phases (load, encode: text encoder + connectors, denoise, decode,
// write_output) on the model kit; `ddo-host encode` stops after the text encoder.
#pragma once

#include "ddo/model/model_run.hpp"

namespace ddo::ltx2 {

void run_ltx2_image(model::ModelRun & run);

}  // namespace ddo::ltx2
