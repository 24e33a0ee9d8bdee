// The plugin's job on the model kit: workload and plans from the run, load the checkpoint, denoise, decode, write
// the image. Phases, routes, counters, identity and outputs are recorded by the kit (ddo/model/model_run.hpp).
#pragma once

#include "ddo/model/model_run.hpp"

namespace ddo::qwen_image_21 {

void run_qwen_image_21(model::ModelRun & run);

}  // namespace ddo::qwen_image_21
