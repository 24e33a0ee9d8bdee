#include "ddo/model/tensor_output.hpp"

#include <ATen/ATen.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"

namespace ddo::model {
namespace {

const char * safetensors_dtype(at::ScalarType t) {
    switch (t) {
    case at::kFloat: return "F32";
    case at::kDouble: return "F64";
    case at::kHalf: return "F16";
    case at::kBFloat16: return "BF16";
    case at::kLong: return "I64";
    case at::kInt: return "I32";
    case at::kShort: return "I16";
    case at::kChar: return "I8";
    case at::kByte: return "U8";
    case at::kBool: return "BOOL";
    default: return nullptr;
    }
}

}  // namespace

std::string encode_safetensors(const NamedTensors & tensors, const std::map<std::string, std::string> & metadata) {
    nlohmann::json header = nlohmann::json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    std::vector<at::Tensor> cpu;
    std::uint64_t offset = 0;
    for (const auto & [name, t] : tensors) {
        const char * dt = safetensors_dtype(t.scalar_type());
        if (!dt) throw RuntimeError("cannot write tensor '" + name + "' as safetensors: dtype " +
                                    std::string(c10::toString(t.scalar_type())) + " has no safetensors name");
        auto c = t.detach().to(at::kCPU).contiguous();
        const std::uint64_t n = std::uint64_t(c.numel()) * c.element_size();
        header[name] = {{"dtype", dt}, {"shape", c.sizes().vec()}, {"data_offsets", {offset, offset + n}}};
        offset += n;
        cpu.push_back(std::move(c));
    }
    std::string h = header.dump();
    h.append((8 - h.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as the reference writer pads
    std::string out(8, '\0');
    const std::uint64_t hn = h.size();
    for (int i = 0; i < 8; ++i) out[std::size_t(i)] = char((hn >> (8 * i)) & 0xff);  // little-endian u64
    out += h;
    for (const auto & c : cpu) out.append(static_cast<const char *>(c.data_ptr()), std::size_t(c.numel()) * c.element_size());
    return out;
}

}  // namespace ddo::model
