#include "ddo/torch/quant/decode.hpp"

#include <ATen/ATen.h>

#include "ddo/error.hpp"
#include "ddo/torch/quant/fp8_dequantize.hpp"
#include "ddo/torch/quant/ggml_dequantize.hpp"
#include "ddo/torch/quant/sdnq_dequantize.hpp"

namespace ddo::torch::quant {

namespace {

std::optional<at::Tensor> role(const ddo::store::EncodedTensor & e, const std::vector<at::Tensor> & parts, std::string_view r) {
    for (std::size_t i = 0; i < e.roles.size(); ++i)
        if (e.roles[i] == r) return parts.at(i);
    return std::nullopt;
}

void check_parts(const ddo::store::EncodedTensor & e, const std::vector<at::Tensor> & parts) {
    if (parts.size() != e.parts.size())
        throw RuntimeError("tensor " + e.name + ": " + std::to_string(parts.size()) + " parts given, its encoding has " +
                           std::to_string(e.parts.size()));
}

}  // namespace

at::Tensor decode(const ddo::store::EncodedTensor & e, const std::vector<at::Tensor> & parts, at::ScalarType dtype) {
    using ddo::store::Encoding;
    check_parts(e, parts);
    const auto & data = parts.front();
    switch (e.encoding) {
        case Encoding::dense: return data.scalar_type() == dtype ? data : data.to(dtype);
        case Encoding::fp8_cast: return fp8_dequantize(data, std::nullopt, Fp8ScaleMath::fp32, dtype, e.name);
        case Encoding::fp8_fp32_scale: return fp8_dequantize(data, role(e, parts, "scale"), Fp8ScaleMath::fp32, dtype, e.name);
        case Encoding::fp8_compute_scale:
            return fp8_dequantize(data, role(e, parts, "scale"), Fp8ScaleMath::out_dtype, dtype, e.name);
        case Encoding::ggml: {  // gguf-py's float32 decode, then the compute dtype (as diffusers loads it dense)
            auto y = ggml_dequantize(data.contiguous(), e.ggml_type, e.shape);
            return y.scalar_type() == dtype ? y : y.to(dtype);
        }
        case Encoding::sdnq: {
            SdnqTensors t{data, *role(e, parts, "scale"), role(e, parts, "zero_point"), role(e, parts, "svd_up"),
                          role(e, parts, "svd_down")};
            const std::string layer = e.name.substr(0, e.name.size() - std::string(".weight").size());
            return sdnq_dequantize(t, e.sdnq, e.shape.at(0), e.shape.at(1), dtype, layer);
        }
    }
    throw RuntimeError("tensor " + e.name + ": unknown encoding");
}

bool decodes_into(const ddo::store::EncodedTensor & e, at::ScalarType part_dtype, at::ScalarType dtype) {
    using ddo::store::Encoding;
    if (e.encoding == Encoding::dense) return part_dtype != dtype;
    if (e.encoding != Encoding::sdnq) return true;
    // SDNQ: the layers sdnq_dequantize_into decodes in one pass (others decode into fresh memory as they must).
    const auto * scale = e.part("scale");
    return dtype == at::kFloat && scale && sdnq_fuses(e.sdnq, e.part("svd_up") != nullptr, scale->shape);
}

void decode_into(const ddo::store::EncodedTensor & e, const std::vector<at::Tensor> & parts, at::Tensor & out) {
    using ddo::store::Encoding;
    check_parts(e, parts);
    const auto & data = parts.front();
    switch (e.encoding) {
        case Encoding::dense: out.copy_(data); return;  // Tensor::to is an empty tensor and this copy_
        case Encoding::fp8_cast: fp8_dequantize_into(data, std::nullopt, Fp8ScaleMath::fp32, out, e.name); return;
        case Encoding::fp8_fp32_scale: fp8_dequantize_into(data, role(e, parts, "scale"), Fp8ScaleMath::fp32, out, e.name); return;
        case Encoding::fp8_compute_scale:
            fp8_dequantize_into(data, role(e, parts, "scale"), Fp8ScaleMath::out_dtype, out, e.name);
            return;
        case Encoding::ggml:
            if (out.scalar_type() == at::kFloat) {
                ggml_dequantize_into(data.contiguous(), e.ggml_type, e.shape, out);
            } else {
                out.copy_(ggml_dequantize(data.contiguous(), e.ggml_type, e.shape));
            }
            return;
        case Encoding::sdnq: {
            SdnqTensors t{data, *role(e, parts, "scale"), role(e, parts, "zero_point"), role(e, parts, "svd_up"),
                          role(e, parts, "svd_down")};
            const std::string layer = e.name.substr(0, e.name.size() - std::string(".weight").size());
            sdnq_dequantize_into(t, e.sdnq, e.shape.at(0), e.shape.at(1), out, layer);
            return;
        }
    }
    throw RuntimeError("tensor " + e.name + ": unknown encoding");
}

}  // namespace ddo::torch::quant
