// Dequantization parity (issue 26): ddo's decoders against the writers' own readers on files those writers produced
// (tools/reference/quant_fixtures.py): every GGML type ddo decodes against gguf-py's quants.dequantize, and every fp8
// layout against TorchAO's Float8Tensor.dequantize() and the Lightricks / ComfyUI loaders' arithmetic. Tolerance:
// none -- equal bit for bit (the decoders follow the references' op order; Note [Quantized weights]).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "ddo/model/tensor_file.hpp"
#include "ddo/store/ggml_type.hpp"
#include "ddo/store/gguf_file.hpp"
#include "ddo/store/weight_store.hpp"
#include "ddo/torch/quant/fp8_dequantize.hpp"
#include "ddo/torch/quant/ggml_dequantize.hpp"
#include "ddo/torch/quant/sdnq_dequantize.hpp"
#include "parity/parity_support.hpp"
#include "synthetic_model.hpp"

namespace {

namespace fs = std::filesystem;
namespace q = ddo::torch::quant;
using ddo::model::TensorFile;

const fs::path kDir = QUANT_FIXTURE_DIR;

class QuantParity : public ddo::test::ParitySuite {
protected:
    QuantParity() : ParitySuite(kDir, "quant_fixtures") {}
};

// Equal bit for bit: same shape, dtype and bytes (NaN payloads and signed zeros included).
void expect_bitwise(const std::string & what, const at::Tensor & got, const at::Tensor & want) {
    ASSERT_EQ(got.sizes(), want.sizes()) << what;
    ASSERT_EQ(got.scalar_type(), want.scalar_type()) << what;
    const auto as_int = got.element_size() == 4 ? at::kInt : at::kShort;
    const auto a = got.contiguous().view(as_int), b = want.contiguous().view(as_int);
    const auto differ = a.ne(b).sum().item<int64_t>();
    EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << got.numel() << " elements differ (max abs "
                         << (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>() << ")";
}

at::Tensor bytes_of(const ddo::store::GgufFile & f, const ddo::store::GgufTensorInfo & t) {
    const auto b = f.bytes(t);
    return at::from_blob(const_cast<std::byte *>(b.data()), {int64_t(b.size())}, at::kByte).clone();
}

void check_gguf_file(const fs::path & path, const std::set<std::string> & names) {
    const auto f = ddo::store::GgufFile::open(path);
    const auto expected = TensorFile::open_file(kDir / "gguf" / "expected.safetensors");
    std::map<std::string, int> per_type;
    for (const auto & t : f.header().tensors) {
        ASSERT_TRUE(expected.contains(t.name)) << t.name;
        const auto what = path.filename().string() + " " + t.name + " (" + ddo::store::ggml_type_label(t.type) + ")";
        const auto got = q::ggml_dequantize(bytes_of(f, t), t.type, t.shape);
        expect_bitwise(what, got, expected.read(t.name));
        // Into a reused buffer (Note [Host decode kernels]: the fused CPU kernels for Q8_0 and Q4_K), over old values.
        auto into = at::full(t.shape, 7.0f, at::kFloat);
        q::ggml_dequantize_into(bytes_of(f, t), t.type, t.shape, into);
        expect_bitwise(what + " into a buffer", into, expected.read(t.name));
        ++per_type[ddo::store::ggml_type_label(t.type)];
    }
    std::set<std::string> seen;
    for (const auto & t : f.header().tensors) seen.insert(t.name);
    EXPECT_EQ(seen, names);
    for (const auto & [type, n] : per_type) std::cout << "[ parity    ] " << type << ": " << n << " tensors bit-exact\n";
}

TEST_F(QuantParity, EveryGgmlTypeDdoDecodesEqualsGgufPyBitForBit) {
    const auto & ref = ddo::test::reference_of(kDir, "quant_fixtures");
    std::set<std::string> names, types;
    for (const auto & c : ref.at("gguf_cases")) {
        names.insert(c.at("name").get<std::string>());
        types.insert(c.at("type").get<std::string>());
    }
    // Every type ddo says it decodes has cases.
    for (std::uint32_t id = 0; id < 64; ++id) {
        const auto t = ddo::store::ggml_type_traits(id);
        if (t && t->decodable) {
            EXPECT_TRUE(types.count(std::string(t->name))) << t->name;
        }
    }
    check_gguf_file(kDir / "gguf" / "types.gguf", names);
}

TEST_F(QuantParity, AGgufWithAnotherAlignmentAndMetadataDecodesTheSame) {
    const auto & ref = ddo::test::reference_of(kDir, "quant_fixtures");
    std::set<std::string> names;
    for (const auto & n : ref.at("gguf_aligned")) names.insert(n.get<std::string>());
    check_gguf_file(kDir / "gguf" / "aligned.gguf", names);
    const auto f = ddo::store::GgufFile::open(kDir / "gguf" / "aligned.gguf");
    EXPECT_EQ(f.header().alignment, 64u);
    const auto & m = f.header().metadata;
    EXPECT_EQ(m.at("general.architecture"), "ddo-test");
    EXPECT_EQ(m.at("ddo.test.u32"), 7);
    EXPECT_EQ(m.at("ddo.test.f32"), 0.5);
    EXPECT_EQ(m.at("ddo.test.bool"), true);
    EXPECT_EQ(m.at("ddo.test.strings"), nlohmann::json::array({"a", "bc", ""}));
    EXPECT_EQ(m.at("ddo.test.ints"), nlohmann::json::array({1, -2, 3}));
    for (const auto & t : f.header().tensors) EXPECT_EQ(t.file_offset % 64, f.header().data_offset % 64) << t.name;
}

TEST_F(QuantParity, TorchAoFloat8EqualsFloat8TensorDequantize) {
    const auto file = TensorFile::open_file(kDir / "fp8" / "torchao.safetensors");
    const auto expected = TensorFile::open_file(kDir / "fp8" / "expected.safetensors");
    for (const std::string p : {"row", "tensor"}) {
        const auto qd = file.read_stored(p + "._weight_qdata");
        const auto sc = file.read_stored(p + "._weight_scale");
        if (p == "row") EXPECT_EQ(sc.sizes(), (std::vector<int64_t>{qd.size(0), 1}));
        else EXPECT_EQ(sc.numel(), 1);
        const auto got = q::fp8_dequantize(qd, sc, q::Fp8ScaleMath::fp32, at::kBFloat16, p + ".weight");
        expect_bitwise("torchao " + p, got, expected.read(p + ".weight"));
    }
}

TEST_F(QuantParity, ScaledAndUnscaledFp8EqualTheirLoaders) {
    const auto expected = TensorFile::open_file(kDir / "fp8" / "expected.safetensors");
    const auto ltx = TensorFile::open_file(kDir / "fp8" / "ltx.safetensors");
    expect_bitwise("Lightricks weight_scale (fp32 fold)",
                   q::fp8_dequantize(ltx.read_stored("ltx.weight"), ltx.read_stored("ltx.weight_scale"), q::Fp8ScaleMath::fp32,
                                     at::kBFloat16, "ltx.weight"),
                   expected.read("ltx.weight"));
    const auto comfy = TensorFile::open_file(kDir / "fp8" / "comfy.safetensors");
    expect_bitwise("ComfyUI scale_weight (bf16 math)",
                   q::fp8_dequantize(comfy.read_stored("comfy.weight"), comfy.read_stored("comfy.scale_weight"),
                                     q::Fp8ScaleMath::out_dtype, at::kBFloat16, "comfy.weight"),
                   expected.read("comfy.weight"));
    const auto cast = TensorFile::open_file(kDir / "fp8" / "cast.safetensors");
    for (const std::string n : {"cast_e4m3.weight", "cast_e5m2.weight"})
        expect_bitwise(n, q::fp8_dequantize(cast.read_stored(n), std::nullopt, q::Fp8ScaleMath::fp32, at::kBFloat16, n),
                       expected.read(n));
}

// Note [Host decode kernels]: the fused CPU decode into a float32 buffer equals the ATen decode in float32 bit for bit
// (which the tests above hold to each reference), and rounds to the reference's bf16.
TEST_F(QuantParity, Fp8IntoABufferEqualsTheDecodeInFloat32) {
    const auto expected = TensorFile::open_file(kDir / "fp8" / "expected.safetensors");
    struct Case {
        std::string file, weight, scale;
        q::Fp8ScaleMath math;
    };
    const std::vector<Case> cases = {{"torchao", "row._weight_qdata", "row._weight_scale", q::Fp8ScaleMath::fp32},
                                     {"torchao", "tensor._weight_qdata", "tensor._weight_scale", q::Fp8ScaleMath::fp32},
                                     {"ltx", "ltx.weight", "ltx.weight_scale", q::Fp8ScaleMath::fp32},
                                     {"comfy", "comfy.weight", "comfy.scale_weight", q::Fp8ScaleMath::out_dtype},
                                     {"cast", "cast_e4m3.weight", "", q::Fp8ScaleMath::fp32},
                                     {"cast", "cast_e5m2.weight", "", q::Fp8ScaleMath::fp32}};
    for (const auto & c : cases) {
        const auto file = TensorFile::open_file(kDir / "fp8" / (c.file + ".safetensors"));
        const auto w = file.read_stored(c.weight);
        const auto s = c.scale.empty() ? std::nullopt : std::optional<at::Tensor>(file.read_stored(c.scale));
        auto into = at::full(w.sizes(), 7.0f, at::kFloat);
        q::fp8_dequantize_into(w, s, c.math, into, c.weight);
        expect_bitwise(c.file + " " + c.weight + " into a buffer", into, q::fp8_dequantize(w, s, c.math, at::kFloat, c.weight));
        if (c.math == q::Fp8ScaleMath::fp32) {
            const std::string name = c.file == "torchao" ? c.weight.substr(0, c.weight.find('.')) + ".weight" : c.weight;
            expect_bitwise(c.file + " " + c.weight + " into a buffer, in bf16", into.to(at::kBFloat16), expected.read(name));
        }
    }
}

TEST_F(QuantParity, EachFileIsRecognisedByItsLayoutAndReadDense) {
    // What a model reads through the kit (TensorFile, ComponentWeights): the encoding detected from the file alone,
    // the scales and markers consumed, the dense tensor under the model's name.
    const auto expected = TensorFile::open_file(kDir / "fp8" / "expected.safetensors");
    struct Case { const char * file; const char * tensor; const char * format; std::vector<std::string> hidden; };
    for (const Case & c : {Case{"ltx.safetensors", "ltx.weight", "FP8 E4M3 scaled", {"ltx.weight_scale", "ltx.input_scale"}},
                           Case{"comfy.safetensors", "comfy.weight", "FP8 E4M3 scaled", {"comfy.scale_weight", "scaled_fp8"}},
                           Case{"cast.safetensors", "cast_e5m2.weight", "FP8 E5M2", {}},
                           Case{"torchao.safetensors", "row.weight", "TorchAO FP8 E4M3", {"row._weight_qdata", "row._weight_scale"}},
                           Case{"torchao.safetensors", "tensor.weight", "TorchAO FP8 E4M3", {"tensor._weight_scale"}}}) {
        const auto f = TensorFile::open_file(kDir / "fp8" / c.file);
        ASSERT_TRUE(f.contains(c.tensor)) << c.file;
        EXPECT_TRUE(f.quantized()) << c.file;
        EXPECT_GT(f.quantization().at("formats").value(c.format, 0), 0) << c.file << " " << f.quantization().dump();
        for (const auto & h : c.hidden) EXPECT_FALSE(f.contains(h)) << c.file << ": " << h << " is a part, not a tensor";
        expect_bitwise(std::string(c.file) + " " + c.tensor, f.read_as(c.tensor, at::kBFloat16), expected.read(c.tensor));
    }
    const auto sdnq_expected = TensorFile::open_file(kDir / "sdnq" / "expected.safetensors");
    for (const std::string c : {"int8_qmm", "uint4_svd_qmm", "mixed", "uint4_hadamard_svd"}) {
        const auto f = TensorFile::open_component(kDir / "sdnq" / c);
        EXPECT_EQ(f.quantization().at("method"), "sdnq");
        EXPECT_FALSE(f.contains("a.scale"));
        EXPECT_EQ(f.shape_of("a.weight"), (std::vector<int64_t>{256, 512}));
        for (const std::string l : {"a", "b", "c"})
            expect_bitwise("sdnq " + c + " " + l + " through the kit", f.read_as(l + ".weight", at::kBFloat16),
                           sdnq_expected.read(c + "/" + l + ".weight"));
        EXPECT_EQ(f.read("norm.weight").scalar_type(), at::kBFloat16);  // dense tensors as stored
    }
}

// A scaled fp8 file with one weight's scale dropped: read as an unscaled cast, that weight would be off by its scale
// (a white image, no error). Refused naming the file and the tensor, also in a file marked scaled_fp8 (ComfyUI).
TEST_F(QuantParity, AMissingScaleIsRefusedNamingTheFileAndTheTensor) {
    const auto fp8 = [](const std::string & n) { return ddo::bench::RawTensor{n, "F8_E4M3", {4, 8}, std::vector<unsigned char>(32, 0x38)}; };
    const auto scalar = [](const std::string & n) {
        const float v = 0.5f;
        std::vector<unsigned char> b(4);
        std::memcpy(b.data(), &v, 4);
        return ddo::bench::RawTensor{n, "F32", {}, b};
    };
    const auto dir = fs::temp_directory_path() / ("ddo_fp8_scale_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto dropped = dir / "dropped.safetensors", marked = dir / "marked.safetensors", cast = dir / "cast.safetensors";
    ddo::bench::write_safetensors(dropped, {fp8("a.weight"), scalar("a.weight_scale"), fp8("b.weight")});
    ddo::bench::write_safetensors(marked, {fp8("a.weight"), ddo::bench::RawTensor{"scaled_fp8", "F8_E4M3", {0}, {}}});
    ddo::bench::write_safetensors(cast, {fp8("a.weight"), fp8("b.weight")});  // unscaled throughout: a plain cast
    for (const auto & [file, says] : {std::pair{dropped, std::string("(a.weight)")}, std::pair{marked, std::string("scaled_fp8")}}) {
        const auto e = ddo::test::error_of([&] { TensorFile::open_file(file); });
        EXPECT_NE(e.find("runtime: "), std::string::npos) << e;
        EXPECT_NE(e.find(file.string()), std::string::npos) << e;
        EXPECT_NE(e.find(file == dropped ? "fp8 tensor b.weight has no b.weight_scale" : "fp8 tensor a.weight has no"),
                  std::string::npos) << e;
        EXPECT_NE(e.find(says), std::string::npos) << e;
    }
    EXPECT_EQ(TensorFile::open_file(cast).read("b.weight").to(at::kFloat).max().item<float>(), 1.0f);  // 0x38: 1.0, unscaled
    fs::remove_all(dir);
}

TEST_F(QuantParity, IgnoringTheScaleWouldBeCaught) {
    // The checks above can fail: the Lightricks layer decoded without its scale is far from the reference, and so is
    // it read without its encoding (the F8 weight cast as it is stored).
    const auto file = TensorFile::open_file(kDir / "fp8" / "ltx.safetensors");
    const auto expected = TensorFile::open_file(kDir / "fp8" / "expected.safetensors");
    const auto unscaled = q::fp8_dequantize(file.read_stored("ltx.weight"), std::nullopt, q::Fp8ScaleMath::fp32, at::kBFloat16, "ltx");
    EXPECT_GT(ddo::test::max_abs(unscaled, expected.read("ltx.weight")), 1.0);
    EXPECT_GT(ddo::test::max_abs(file.read_stored("ltx.weight").to(at::kBFloat16), expected.read("ltx.weight")), 1.0);
}

// The SDNQ config of a saved case: quantization_config.json (sdnq's loader prefers it), else config.json's.
ddo::store::SdnqConfig sdnq_config(const fs::path & dir) {
    const auto q = dir / "quantization_config.json";
    std::ifstream in(fs::exists(q) ? q : dir / "config.json");
    auto j = nlohmann::json::parse(in);
    return ddo::store::SdnqConfig::from_json(fs::exists(q) ? j : j.at("quantization_config"), fs::exists(q) ? q : dir / "config.json");
}

q::SdnqTensors sdnq_tensors(const TensorFile & f, const std::string & layer) {
    q::SdnqTensors t{f.read_stored(layer + ".weight"), f.read_stored(layer + ".scale"), {}, {}, {}};
    if (f.contains_stored(layer + ".zero_point")) t.zero_point = f.read_stored(layer + ".zero_point");
    if (f.contains_stored(layer + ".svd_up")) t.svd_up = f.read_stored(layer + ".svd_up");
    if (f.contains_stored(layer + ".svd_down")) t.svd_down = f.read_stored(layer + ".svd_down");
    return t;
}

// The layer decoded as a loader would: its dtype from the config, its dense shape from the stored shapes, its rule.
at::Tensor sdnq_decode(const ddo::store::SdnqConfig & cfg, const TensorFile & f, const std::string & layer) {
    const auto t = sdnq_tensors(f, layer);
    const auto [out, in] = ddo::store::sdnq_dense_shape(t.weight.sizes().vec(), t.scale.sizes().vec(), cfg.dtype_of(layer), layer);
    return q::sdnq_dequantize(t, cfg.layer(layer, out, in, t.scale.dim() == 3), out, in, at::kBFloat16, layer);
}

TEST_F(QuantParity, EverySdnqLayoutEqualsSdnqsOwnDecodeAfterADiffusersLoad) {
    const auto & ref = ddo::test::reference_of(kDir, "quant_fixtures");
    const auto expected = TensorFile::open_file(kDir / "sdnq" / "expected.safetensors");
    int n = 0;
    for (const auto & [c, opts] : ref.at("sdnq_cases").items()) {
        const auto dir = kDir / "sdnq" / c;
        const auto cfg = sdnq_config(dir);
        const auto f = TensorFile::open_component(dir);
        for (const auto & l : ref.at("sdnq_layers")) {
            const std::string layer = l.get<std::string>();
            expect_bitwise("sdnq " + c + " " + layer + " (" + cfg.dtype_of(layer).name + ")", sdnq_decode(cfg, f, layer),
                           expected.read(c + "/" + layer + ".weight"));
            ++n;
        }
    }
    std::cout << "[ parity    ] " << n << " SDNQ layers bit-exact\n";
    EXPECT_GE(n, 30);
}

// Note [Host decode kernels]: every SDNQ layer decoded into a float32 buffer (over old values) equals the ATen decode
// in float32 bit for bit; the row-wise integer layers without SVD or rotation take the fused kernel.
TEST_F(QuantParity, EverySdnqLayerIntoABufferEqualsTheDecodeInFloat32) {
    const auto & ref = ddo::test::reference_of(kDir, "quant_fixtures");
    int n = 0, fused = 0;
    for (const auto & [c, opts] : ref.at("sdnq_cases").items()) {
        const auto dir = kDir / "sdnq" / c;
        const auto cfg = sdnq_config(dir);
        const auto f = TensorFile::open_component(dir);
        for (const auto & l : ref.at("sdnq_layers")) {
            const std::string layer = l.get<std::string>();
            const auto t = sdnq_tensors(f, layer);
            const auto [out, in] = ddo::store::sdnq_dense_shape(t.weight.sizes().vec(), t.scale.sizes().vec(), cfg.dtype_of(layer), layer);
            const auto rule = cfg.layer(layer, out, in, t.scale.dim() == 3);
            auto into = at::full({out, in}, 7.0f, at::kFloat);
            q::sdnq_dequantize_into(t, rule, out, in, into, layer);
            expect_bitwise("sdnq " + c + " " + layer + " into a buffer", into, q::sdnq_dequantize(t, rule, out, in, at::kFloat, layer));
            fused += q::sdnq_fuses(rule, t.svd_up.has_value(), t.scale.sizes().vec());
            ++n;
        }
    }
    std::cout << "[ parity    ] " << n << " SDNQ layers into a buffer bit-exact, " << fused << " through the fused kernel\n";
    EXPECT_GE(fused, 5);
}

TEST_F(QuantParity, AnSdnqConfigThatDisagreesWithTheTensorsIsRefusedNamingTheLayer) {
    // The int8 quantized-matmul file (weights stored [in, out], scale [1, out]) read with use_quantized_matmul off.
    auto dir = kDir / "sdnq" / "int8_qmm";
    std::ifstream in(dir / "quantization_config.json");
    auto qc = nlohmann::json::parse(in);
    qc["use_quantized_matmul"] = false;
    const auto f = TensorFile::open_component(dir);
    auto cfg = ddo::store::SdnqConfig::from_json(qc, dir / "quantization_config.json");
    auto e = ddo::test::error_of([&] { sdnq_decode(cfg, f, "a"); });
    EXPECT_NE(e.find("runtime: SDNQ layer a: scale [1,256], expected [256,1]"), std::string::npos) << e;
    EXPECT_NE(e.find("does not match the tensors"), std::string::npos) << e;
    // A uint4 file (with zero points) read as int4.
    dir = kDir / "sdnq" / "uint4";
    std::ifstream in2(dir / "quantization_config.json");
    qc = nlohmann::json::parse(in2);
    qc["weights_dtype"] = "int4";
    cfg = ddo::store::SdnqConfig::from_json(qc, dir / "quantization_config.json");
    const auto f2 = TensorFile::open_component(dir);
    e = ddo::test::error_of([&] { sdnq_decode(cfg, f2, "a"); });
    EXPECT_NE(e.find("a signed int4 layer has no zero_point, the file has one"), std::string::npos) << e;
    // What ddo does not decode is refused naming the key (exit 2).
    qc["use_codebook"] = true;
    e = ddo::test::error_of([&] { ddo::store::SdnqConfig::from_json(qc, "q.json"); });
    EXPECT_NE(e.find("usage: q.json: quantization_config.use_codebook = true: a codebook"), std::string::npos) << e;
    qc["use_codebook"] = false;
    qc["scale_dtype"] = "uint8";
    e = ddo::test::error_of([&] { ddo::store::SdnqConfig::from_json(qc, "q.json"); });
    EXPECT_NE(e.find("quantization_config.scale_dtype = \"uint8\": a double-quantized scale"), std::string::npos) << e;
}

}  // namespace

namespace {

using Tensors = std::vector<ddo::bench::RawTensor>;

// Every stored tensor of `store` with its bytes, in the store's order.
Tensors stored_tensors(const ddo::store::WeightStore & store) {
    Tensors t;
    for (const auto * info : store.tensors()) {
        std::vector<unsigned char> bytes(info->nbytes);
        store.read_tensor(*info, bytes.data(), ddo::store::ReadMode::pread);
        t.push_back({info->name, std::string(ddo::store::dtype_name(info->dtype)), info->shape, std::move(bytes)});
    }
    return t;
}

// A copy of the component folder `src` in `dst` whose weights file holds the stored tensors as `edit` leaves them.
fs::path damaged_copy(const fs::path & src, const fs::path & dst, const std::function<void(Tensors &)> & edit) {
    auto t = stored_tensors(ddo::store::WeightStore::open_component(src));
    edit(t);
    fs::remove_all(dst);
    fs::create_directories(dst);
    for (const auto & e : fs::directory_iterator(src))
        if (e.path().extension() == ".json") fs::copy_file(e.path(), dst / e.path().filename());
    ddo::bench::write_safetensors(dst / "diffusion_pytorch_model.safetensors", t);
    return dst;
}

void drop(Tensors & t, const std::string & name) {
    std::erase_if(t, [&](const auto & x) { return x.name == name; });
}

ddo::bench::RawTensor & tensor_named(Tensors & t, const std::string & name) {
    for (auto & x : t)
        if (x.name == name) return x;
    throw std::runtime_error("no stored tensor " + name);
}

}  // namespace

// Issue 40: a layer stored quantized whose companion tensor is missing, of the wrong shape or of the wrong dtype is
// refused when the folder is opened (exit 4), naming the weights file and the tensor; it is never decoded another way
// (an SDNQ float8 weight without its scale was read as an unscaled cast: an image 164/255 away, exit 0). Every part
// of layer `a` (and `c`, Hadamard-rotated in some cases) of every SDNQ case is dropped in turn.
TEST_F(QuantParity, EveryDamagedSdnqLayerIsRefusedNamingTheFileAndTheTensor) {
    const auto & ref = ddo::test::reference_of(kDir, "quant_fixtures");
    const auto tmp = fs::temp_directory_path() / ("ddo_sdnq_damaged_" + std::to_string(::getpid()));
    int n = 0;
    for (const auto & [c, opts] : ref.at("sdnq_cases").items()) {
        const auto src = kDir / "sdnq" / c;
        for (const std::string layer : {"a", "c"}) {
            for (const std::string part : {"scale", "zero_point", "svd_up", "svd_down"}) {
                const std::string name = layer + "." + part;
                if (!TensorFile::open_component(src).contains_stored(name)) continue;
                const auto dir = damaged_copy(src, tmp / c, [&](Tensors & t) { drop(t, name); });
                const auto e = ddo::test::error_of([&] { TensorFile::open_component(dir); });
                EXPECT_EQ(e.rfind("runtime: SDNQ layer " + layer + " in " + (dir / "diffusion_pytorch_model.safetensors").string(), 0), 0u)
                    << c << " without " << name << ": " << e;
                EXPECT_NE(e.find(name + " is missing"), std::string::npos) << c << " without " << name << ": " << e;
                ++n;
            }
        }
    }
    std::cout << "[ parity    ] " << n << " SDNQ files with a part dropped, each refused naming it\n";
    EXPECT_GE(n, 30);
    // The case, and its message for the integer types: the scale named, not "dtype I8, expected a floating type".
    for (const std::string c : {"fp8", "int8", "uint4"}) {
        const auto dir = damaged_copy(kDir / "sdnq" / c, tmp / c, [&](Tensors & t) { drop(t, "b.scale"); });
        const auto e = ddo::test::error_of([&] { TensorFile::open_component(dir); });
        EXPECT_NE(e.find("b.scale is missing (its weight is"), std::string::npos) << c << ": " << e;
        EXPECT_EQ(e.find("expected a floating type"), std::string::npos) << c << ": " << e;
    }
    // Wrong dtype and wrong shape: a scale stored as integers, a scale of half the rows, a zero point of another shape.
    const auto refused = [&](const std::string & c, const std::function<void(Tensors &)> & edit, const std::string & says) {
        const auto dir = damaged_copy(kDir / "sdnq" / c, tmp / c, edit);
        const auto e = ddo::test::error_of([&] { TensorFile::open_component(dir); });
        EXPECT_NE(e.find(says), std::string::npos) << c << ": " << e;
        EXPECT_NE(e.find(dir.string()), std::string::npos) << c << ": " << e;
    };
    refused("int8", [](Tensors & t) {
        auto & s = tensor_named(t, "a.scale");
        s.dtype = s.dtype == "F32" ? "I32" : "I16";  // the scale's bytes read as integers of their width
    }, "is not a floating-point tensor");
    refused("int8", [](Tensors & t) {
        auto & s = tensor_named(t, "a.scale");
        s.shape[0] /= 2;
        s.bytes.resize(s.bytes.size() / 2);
    }, "scale [128,1], expected [256,1]");
    refused("int8", [](Tensors & t) {  // an empty layer: no rows of values behind the scale's rows
        auto & w = tensor_named(t, "a.weight");
        w.shape[1] = 0;
        w.bytes.clear();
    }, "hold an empty [256,0] layer");
    refused("uint8", [](Tensors & t) {
        auto & z = tensor_named(t, "a.zero_point");
        z.shape = {1, z.shape[0]};
    }, "zero_point [1,256]");
    fs::remove_all(tmp);
}

// The fp8 layouts' companions: a TorchAO layer's scale of a shape that is neither per row nor per block, a Lightricks
// layer's scale dropped while its input_scale stays (the only scaled layer of its file), a ComfyUI comfy_quant layer
// without its scale_weight.
TEST_F(QuantParity, EveryDamagedFp8LayerIsRefusedNamingTheFileAndTheTensor) {
    const auto tmp = fs::temp_directory_path() / ("ddo_fp8_damaged_" + std::to_string(::getpid()));
    fs::create_directories(tmp);
    const auto rewrite = [&](const std::string & file, const std::function<void(Tensors &)> & edit) {
        const auto store = ddo::store::WeightStore::open_file(kDir / "fp8" / file);
        auto t = stored_tensors(store);
        edit(t);
        std::vector<std::pair<std::string, std::string>> meta;
        for (const auto & f : store.files())
            for (const auto & [k, v] : f.metadata()) meta.emplace_back(k, v);
        const auto out = tmp / file;
        ddo::bench::write_safetensors(out, t, meta);
        return out;
    };
    struct Case { std::string file; std::function<void(Tensors &)> edit; std::string says; };
    const std::vector<Case> cases = {
        {"ltx.safetensors", [](Tensors & t) { drop(t, "ltx.weight_scale"); }, "fp8 tensor ltx.weight has ltx.input_scale but no ltx.weight_scale"},
        {"torchao.safetensors", [](Tensors & t) {
             auto & s = tensor_named(t, "row._weight_scale");  // per row [64, 1] -> [1, 64]: neither per row nor per block
             s.shape = {1, s.shape[0]};
         }, "the scale row._weight_scale [1,64]"},
        {"ltx.safetensors", [](Tensors & t) { tensor_named(t, "ltx.weight_scale").dtype = "I32"; }, "the scale ltx.weight_scale [] I32"},
    };
    for (const auto & c : cases) {
        const auto file = rewrite(c.file, c.edit);
        const auto e = ddo::test::error_of([&] { TensorFile::open_file(file); });
        EXPECT_EQ(e.rfind("runtime: " + file.string() + ": ", 0), 0u) << c.file << ": " << e;
        EXPECT_NE(e.find(c.says), std::string::npos) << c.file << ": " << e;
    }
    // A per-row scale stored transposed ([1, out]) on a square weight: every dim divides, yet it would decode per
    // column. Refused as no writer's layout.
    const auto square = tmp / "square.safetensors";
    ddo::bench::write_safetensors(square, {{"sq.weight", "F8_E4M3", {8, 8}, std::vector<unsigned char>(64, 0x38)},
                                           {"sq.weight_scale", "F32", {1, 8}, std::vector<unsigned char>(32, 0)}});
    const auto es = ddo::test::error_of([&] { TensorFile::open_file(square); });
    EXPECT_NE(es.find("the scale sq.weight_scale [1,8] F32 of fp8 tensor sq.weight [8,8]"), std::string::npos) << es;
    const auto comfy = tmp / "comfy_quant.safetensors";
    ddo::bench::write_safetensors(comfy, {{"m.weight", "F8_E4M3", {4, 8}, std::vector<unsigned char>(32, 0x38)},
                                          {"m.comfy_quant", "U8", {2}, {0x7b, 0x7d}}});
    const auto e = ddo::test::error_of([&] { TensorFile::open_file(comfy); });
    EXPECT_NE(e.find("fp8 tensor m.weight has m.comfy_quant but no m.weight_scale"), std::string::npos) << e;
    fs::remove_all(tmp);
}

// Issue 40 item 3: a layer stored in the quantized-matmul layout ([in, out], scale [1, out]) decodes to the same
// contiguous [out, in] tensor as the same values stored plain, so a matmul on either gives the same bits. The int8_qmm
// case's layer `a` restored to the plain layout (weight transposed, scale [out, 1], use_quantized_matmul off for it).
TEST_F(QuantParity, BothSdnqLayoutsOfOneLayerDecodeToOneLayoutAndOneMatmul) {
    for (const std::string c : {"int8_qmm", "int8_qmm_bf16", "fp8_qmm", "uint8_qmm"}) {
        const auto dir = kDir / "sdnq" / c;
        const auto cfg = sdnq_config(dir);
        const auto f = TensorFile::open_component(dir);
        auto t = sdnq_tensors(f, "a");
        const auto [out, in] = ddo::store::sdnq_dense_shape(t.weight.sizes().vec(), t.scale.sizes().vec(), cfg.dtype_of("a"), "a");
        const auto rule = cfg.layer("a", out, in, false);
        ASSERT_TRUE(rule.transposed) << c;
        auto plain_rule = rule;
        plain_rule.transposed = false;
        plain_rule.quantized_matmul = false;
        q::SdnqTensors plain{t.weight.t().contiguous(), t.scale.t().contiguous(), {}, {}, {}};
        if (t.zero_point) plain.zero_point = t.zero_point->t().contiguous();
        const auto a = q::sdnq_dequantize(t, rule, out, in, at::kBFloat16, "a");
        const auto b = q::sdnq_dequantize(plain, plain_rule, out, in, at::kBFloat16, "a");
        EXPECT_TRUE(a.is_contiguous()) << c << ": the quantized-matmul layout decodes to a strided view";
        EXPECT_EQ(a.strides(), b.strides()) << c;
        expect_bitwise(c + " a: both layouts' weights", a, b);
        const auto x = at::randn({7, in}, at::TensorOptions().dtype(at::kFloat)).to(at::kBFloat16);
        expect_bitwise(c + " a: both layouts' linear", at::linear(x, a), at::linear(x, b));
    }
}
