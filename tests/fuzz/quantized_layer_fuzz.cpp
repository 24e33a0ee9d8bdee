// Fuzz target: a component folder of quantized layers, through the store's detection (ComponentEncodings::detect,
// ddo/store/weight_encoding.hpp) that every run does before a weight is read (issue 40: a damaged SDNQ float8 file
// whose scale was missing ran to an image 164/255 away, exit 0). The input's first byte picks the folder's
// quantization_config (SDNQ int8, uint8, uint4, int4, float8, int8 with the quantized-matmul layout, or none: the
// self-described fp8 layouts); the rest is the weights file (diffusion_pytorch_model.safetensors). A damaged layer
// must be refused (ddo::Error naming it); an accepted folder must hold every layer whole:
//   - no weight that is stored quantized is offered dense or as an unscaled cast when it is SDNQ's or carries a
//     scaled layer's companion (.input_scale, .scale_input, .comfy_quant);
//   - every SDNQ layer has its scale, its zero point exactly when unsigned, both SVD factors or neither, and a dense
//     shape whose size matches what it stores;
//   - every scaled fp8 layer has a floating scale.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "ddo/store/weight_encoding.hpp"
#include "ddo/store/weight_store.hpp"
#include "fuzz_support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace ddo::store;

const char * const kConfigs[] = {
    R"({"quantization_config": {"quant_method": "sdnq", "weights_dtype": "int8"}})",
    R"({"quantization_config": {"quant_method": "sdnq", "weights_dtype": "uint8"}})",
    R"({"quantization_config": {"quant_method": "sdnq", "weights_dtype": "uint4"}})",
    R"({"quantization_config": {"quant_method": "sdnq", "weights_dtype": "int4"}})",
    R"({"quantization_config": {"quant_method": "sdnq", "weights_dtype": "float8_e4m3fn"}})",
    R"({"quantization_config": {"quant_method": "sdnq", "weights_dtype": "int8", "use_quantized_matmul": true}})",
    R"({})",
};

bool is_float(DType d) { return d == DType::f16 || d == DType::bf16 || d == DType::f32 || d == DType::f64; }

const fs::path & folder() {
    static const fs::path dir = [] {
        const auto d = fs::temp_directory_path() / ("ddo_quantized_layer_fuzz_" + std::to_string(::getpid()));
        fs::create_directories(d);
        return d;
    }();
    return dir;
}

void write(const fs::path & file, std::string_view bytes) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
}

void check(const WeightStore & store, const ComponentEncodings & enc, bool sdnq) {
    for (const auto & name : enc.names()) {
        const auto * e = enc.find(name);
        DDO_FUZZ_CHECK(e && !e->parts.empty() && e->parts.size() == e->roles.size());
        const std::string p = name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
        if (e->encoding == Encoding::dense || e->encoding == Encoding::fp8_cast) {
            const auto * t = e->parts.front();
            // an SDNQ folder's non-floating weight is always a quantized layer
            DDO_FUZZ_CHECK(!(sdnq && name.ends_with(".weight") && !is_float(t->dtype) && e->encoding == Encoding::dense));
            if (e->encoding == Encoding::fp8_cast)
                for (const char * companion : {".input_scale", ".scale_input", ".comfy_quant", ".weight_scale", ".scale_weight"})
                    DDO_FUZZ_CHECK(!store.find(p + companion));
        }
        if (e->encoding == Encoding::sdnq) {
            DDO_FUZZ_CHECK(e->part("data") && e->part("scale"));
            DDO_FUZZ_CHECK(is_float(e->part("scale")->dtype));
            DDO_FUZZ_CHECK(e->sdnq.dtype.is_unsigned == (e->part("zero_point") != nullptr));
            DDO_FUZZ_CHECK((e->part("svd_up") != nullptr) == (e->part("svd_down") != nullptr));
            DDO_FUZZ_CHECK(e->shape.size() == 2 && e->shape[0] > 0 && e->shape[1] > 0);
            const unsigned __int128 values = static_cast<unsigned __int128>(e->shape[0]) * static_cast<unsigned __int128>(e->shape[1]);
            const unsigned __int128 stored = e->part("data")->numel();
            DDO_FUZZ_CHECK(values == stored * (e->sdnq.dtype.packed ? 2 : 1));
        }
        if (e->encoding == Encoding::fp8_fp32_scale || e->encoding == Encoding::fp8_compute_scale) {
            DDO_FUZZ_CHECK(e->part("scale") && is_float(e->part("scale")->dtype));
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t * data, std::size_t size) {
    if (size < 1) return 0;
    const std::size_t pick = data[0] % (sizeof kConfigs / sizeof kConfigs[0]);
    const auto dir = folder();
    write(dir / "config.json", kConfigs[pick]);
    write(dir / "diffusion_pytorch_model.safetensors", ddo::fuzz::bytes(data + 1, size - 1));
    ddo::fuzz::accepted([&] {
        const auto store = WeightStore::open_component(dir);
        const auto enc = ComponentEncodings::detect(store);
        check(store, enc, pick != 6);
    });
    return 0;
}
