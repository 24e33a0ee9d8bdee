// The `quantization_config` of an SDNQ checkpoint (quant_method "sdnq": config.json, or the quantization_config.json
// that sdnq's save_sdnq_model writes beside it and its loader prefers), and what it decides per layer: the weights
// dtype, whether the layer uses SDNQ's quantized matmul (which stores int8/uint8/fp8 weights transposed and every SVD
// factor transposed), and the Hadamard group. The rules are sdnq 0.2.8's (quantizer.py, utils.py:
// check_param_name_in, check_quantized_matmul_is_allowed, get_hadamard_group_size). What ddo does not decode yet is
// refused naming the key: codebook layers, double-quantized scales, per-module quant_config overrides, weight dtypes
// other than int8, uint8, int4, uint4, float8_e4m3fn, float8_e5m2. Note [Quantized weights] in docs/architecture.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ddo/store/dtype.hpp"

namespace ddo::store {

struct SdnqDtype {
    std::string name;      // "int8", "uint4", "float8_e4m3fn", ...
    int bits = 8;
    bool integer = true;
    bool is_unsigned = false;
    bool packed = false;   // stored several to a byte (int4 / uint4: two nibbles, low first)
};

// One layer's decoding parameters, from the config and the layer's dense shape.
struct SdnqLayerRule {
    SdnqDtype dtype;
    bool quantized_matmul = false;  // the layer uses SDNQ's quantized matmul (SVD factors stored transposed)
    bool transposed = false;        // the weight (and its scale) stored [in, out]
    std::int64_t hadamard_group = 0;  // 0: no Hadamard rotation
    bool fp32 = true;               // dequantize_fp32: scales, zero points and SVD factors in fp32
};

class SdnqConfig {
public:
    // qc: the quantization_config object; `file` names it in errors. Throws UsageError (exit 2) naming the file and
    // key for what ddo does not decode, RuntimeError for a value of the wrong type.
    static SdnqConfig from_json(const nlohmann::json & qc, const std::filesystem::path & file);

    // The rule of the Linear `layer` (its module name, e.g. "transformer_blocks.3.attn.to_q") of dense shape
    // [out, in] stored with `grouped` scales (a 3-D scale: more than one group per row).
    SdnqLayerRule layer(const std::string & layer, std::int64_t out, std::int64_t in, bool grouped) const;
    // Whether sdnq quantized `layer`: false when modules_to_not_convert names it (sdnq left it in the model dtype).
    bool converted(const std::string & layer) const;
    // The layer's weight dtype: modules_dtype_dict's entry that matches it, else weights_dtype.
    SdnqDtype dtype_of(const std::string & layer) const;

    const std::string & weights_dtype() const noexcept { return weights_dtype_; }
    const std::string & version() const noexcept { return version_; }

private:
    std::string weights_dtype_, matmul_dtype_, version_;
    std::map<std::string, std::vector<std::string>> modules_dtype_;
    std::vector<std::string> not_use_matmul_, not_convert_;
    bool use_quantized_matmul_ = false, use_hadamard_ = false, dequantize_fp32_ = true;
    std::int64_t hadamard_group_size_ = 256;
};

// sdnq's dtype table for the dtypes ddo decodes; throws UsageError naming `where` for any other.
SdnqDtype sdnq_dtype(const std::string & name, const std::string & where);
// sdnq's check_param_name_in: `name` matches an entry equal to it, equal to one of its dot-separated parts, a
// leading-dot prefix (".proj_out" matches names starting with "proj_out"), or a `*` glob.
bool sdnq_name_matches(const std::string & name, const std::vector<std::string> & patterns);

// The dense {out, in} a layer's stored weight and scale encode, from their shapes and the dtype's packing: a packed
// weight is 1-D with a [out, ...] scale; an unpacked one [out, in], [in, out] (transposed: a [1, out] scale) or
// [out, groups, size]. Throws RuntimeError naming the layer `name` when the shapes do not fit together (a
// quantization_config that does not match the tensors). The one rule for the store's detection and the decoder.
std::pair<std::int64_t, std::int64_t> sdnq_dense_shape(const std::vector<std::int64_t> & weight_shape,
                                                       const std::vector<std::int64_t> & scale_shape,
                                                       const SdnqDtype & dtype, const std::string & name);

// What one stored part of an SDNQ layer is, without its bytes: the store's TensorInfo or a decoder's tensor.
struct SdnqPart {
    DType dtype = DType::f32;
    std::vector<std::int64_t> shape;
};

// The stored parts of one layer `P`: P.weight and P.scale always, the others when stored.
struct SdnqParts {
    std::optional<SdnqPart> weight, scale, zero_point, svd_up, svd_down;
};

// The one rule every SDNQ layer is held to before it is decoded (the store's detection and the decoder call it): the
// weight's dtype is the rule's (I8 for int8, U8 for uint8 and the packed 4-bit types, F8 for float8) and its shape
// [out, in], [in, out] (transposed) or [out, groups, size]; the scale is floating, [out, 1], [1, out] (transposed) or
// [out, groups, 1]; an unsigned layer has a floating zero_point of the scale's shape and a signed one none; svd_up and
// svd_down come together, floating, forming [out, in] ([r, out] and [in, r] when the layer uses the quantized matmul).
// A missing part is named as `P.scale` etc. Throws RuntimeError "SDNQ layer <name>: <what>"; `name` may carry the
// file ("a in /x/diffusion_pytorch_model.safetensors").
void check_sdnq_parts(const SdnqParts & parts, const SdnqLayerRule & rule, std::int64_t out, std::int64_t in,
                      const std::string & layer, const std::string & name);

}  // namespace ddo::store
