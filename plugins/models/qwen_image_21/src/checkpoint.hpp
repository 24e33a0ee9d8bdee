// The model kit's checkpoint reader (ddo/model/tensor_file.hpp), under the names this plugin's code uses.
#pragma once

#include "ddo/model/tensor_file.hpp"

namespace ddo::qwen_image_21 {

using model::shape_str;
using model::TensorFile;

}  // namespace ddo::qwen_image_21
