// "[256,512]": a shape in the decoders' error messages (private to core/torch/src/quant).
#pragma once

#include <string>

#include <c10/util/ArrayRef.h>

namespace ddo::torch::quant {

inline std::string shape_text(c10::IntArrayRef s) {
    std::string t = "[";
    for (std::size_t i = 0; i < s.size(); ++i) t += (i ? "," : "") + std::to_string(s[i]);
    return t + "]";
}

}  // namespace ddo::torch::quant
