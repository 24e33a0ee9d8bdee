// How each tensor a model asks for is stored in a component folder: as itself (dense), or as a quantized encoding
// spread over several stored tensors (issue 26, Note [Quantized weights] in docs/architecture.md). Detected per folder
// (its quantization_config), then per tensor, since every real checkpoint is mixed:
//   - SDNQ (quantization_config.quant_method "sdnq"): P.weight int8/uint8/packed/fp8 + P.scale [+ P.zero_point]
//     [+ P.svd_up, P.svd_down];
//   - TorchAO (safetensors from torchao >= 0.16, quant_method "torchao" or a bare file): P._weight_qdata +
//     P._weight_scale, described by the file's __metadata__ (Float8Tensor only; another type is refused naming it);
//   - scaled fp8 (Lightricks LTX-2: P.weight F8 + P.weight_scale, folded in fp32; ComfyUI: P.scale_weight or a
//     P.comfy_quant layer, decoded in the compute dtype); P.input_scale / P.scale_input and the markers (scaled_fp8,
//     P.comfy_quant) are read, not offered;
//   - unscaled fp8 (F8 without a scale): a cast;
//   - GGUF (a .gguf file): a block-quantized tensor (Q8_0, Q4_K, ...) is one stored part of its bytes, decoded by
//     its GGML type; F32/F16/BF16 tensors are dense;
//   - dense: any other tensor, as stored.
// The engine plans and moves the stored tensors (`parts`); ddo/torch/quant/decode.hpp makes the dense tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ddo/store/sdnq_config.hpp"
#include "ddo/store/tensor_info.hpp"
#include "ddo/store/weight_store.hpp"

namespace ddo::store {

enum class Encoding : std::uint8_t { dense, sdnq, fp8_fp32_scale, fp8_compute_scale, fp8_cast, ggml };

struct EncodedTensor {
    std::string name;                       // the name the model asks for (P.weight)
    Encoding encoding = Encoding::dense;
    std::vector<const TensorInfo *> parts;  // stored tensors, data first (dense: the tensor itself)
    std::vector<std::string> roles;         // per part: "data", "scale", "zero_point", "svd_up", "svd_down"
    std::vector<std::int64_t> shape;        // the dense shape
    std::string format;                     // report label: "BF16", "SDNQ int8", "FP8 E4M3 scaled", "TorchAO FP8 E4M3"
    SdnqLayerRule sdnq;                     // Encoding::sdnq
    std::uint32_t ggml_type = 0;            // Encoding::ggml: the GGML type id (ddo/store/ggml_type.hpp)
    std::uint64_t stored_bytes() const noexcept;
    const TensorInfo * part(std::string_view role) const noexcept;
};

class ComponentEncodings {
public:
    // Reads `store`'s folder: its quantization_config (quantization_config.json beside config.json first, as sdnq's
    // loader does) and each file's metadata. Throws UsageError (exit 2) naming the file and key for a quantization
    // ddo does not decode, RuntimeError (exit 4) naming the tensor for a quantized tensor without its parts.
    static ComponentEncodings detect(const WeightStore & store);

    // The tensor the model asks for; null when the folder has no such tensor.
    const EncodedTensor * find(std::string_view name) const noexcept;
    std::vector<std::string> names() const;  // every tensor offered, sorted
    bool quantized() const noexcept { return quantized_; }
    // {"method": "sdnq"|"torchao"|"fp8"|"gguf"|null, "formats": {"SDNQ int8": 312, "BF16": 40}, "stored_bytes", "dense_bytes",
    //  "config": the quantization_config (or null)} over `names` (every tensor offered when empty); dense_bytes counts
    // a quantized tensor at `dense_element_size` bytes per element (the compute dtype's), a dense one as stored.
    nlohmann::json summary(const std::vector<std::string> & names = {}, std::uint32_t dense_element_size = 2) const;

private:
    std::map<std::string, EncodedTensor, std::less<>> tensors_;
    std::shared_ptr<const nlohmann::json> config_;
    std::string method_;
    bool quantized_ = false;
};

}  // namespace ddo::store
