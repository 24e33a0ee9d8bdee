// The model kit's flow-match schedule (ddo/model/flow_match.hpp) under the names this plugin's code uses.
#pragma once

#include "ddo/model/flow_match.hpp"

namespace ddo::qwen_image_21 {

using SchedulerConfig = model::FlowMatchConfig;
using model::calculate_shift;
using model::default_sigmas;
using model::FlowMatchSchedule;
using model::make_schedule;
using model::sigmas_from;

}  // namespace ddo::qwen_image_21
