// Detection order: see ddo/store/weight_encoding.hpp.
#include "ddo/store/weight_encoding.hpp"

#include <set>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"
#include "ddo/store/diffusers_checkpoint.hpp"
#include "ddo/store/ggml_type.hpp"

namespace ddo::store {

namespace fs = std::filesystem;

namespace {

bool is_float(DType d) { return d == DType::f16 || d == DType::bf16 || d == DType::f32 || d == DType::f64; }
bool is_fp8(DType d) { return d == DType::f8_e4m3 || d == DType::f8_e5m2; }
std::string fp8_name(DType d) { return d == DType::f8_e5m2 ? "E5M2" : "E4M3"; }

std::string prefix_of(const std::string & name, std::string_view suffix) {
    return name.substr(0, name.size() - suffix.size());
}

// The folder's quantization_config (quantization_config.json first, as sdnq's loader reads it), or null.
std::pair<nlohmann::json, fs::path> quantization_config(const WeightStore & store) {
    const fs::path q = store.directory() / "quantization_config.json";
    if (fs::exists(q)) return {read_json_file(q), q};
    const auto & c = store.config();
    if (c.is_object() && c.contains("quantization_config") && !c.at("quantization_config").is_null())
        return {c.at("quantization_config"), store.directory() / "config.json"};
    return {nullptr, {}};
}

struct Builder {
    const WeightStore & store;
    std::set<std::string> consumed;  // stored tensors that are parts of another tensor
    std::map<std::string, EncodedTensor, std::less<>> out;

    const TensorInfo * get(const std::string & n) const { return store.find(n); }
    void add(EncodedTensor e) {
        for (const auto * p : e.parts) consumed.insert(p->name);
        const std::string n = e.name;
        out.insert_or_assign(n, std::move(e));
    }
    EncodedTensor make(const std::string & name, Encoding enc, std::string format, std::vector<std::int64_t> shape) {
        EncodedTensor e;
        e.name = name;
        e.encoding = enc;
        e.format = std::move(format);
        e.shape = std::move(shape);
        return e;
    }
    void part(EncodedTensor & e, const std::string & stored, const char * role) {
        if (const auto * t = get(stored)) {
            e.parts.push_back(t);
            e.roles.emplace_back(role);
        }
    }
};

std::optional<SdnqPart> sdnq_part(const TensorInfo * t) {
    if (!t) return std::nullopt;
    return SdnqPart{t->dtype, t->shape};
}

// Every stored weight of an SDNQ folder that is not floating is a quantized layer (sdnq stores what it leaves alone in
// the model dtype): it is decoded with all of its parts or refused, naming the file and the missing or inconsistent
// tensor (check_sdnq_parts), never read as something else (an unscaled fp8 cast, a dense int8). A layer stored in
// another fp8 layout (its own .weight_scale / .scale_weight), or one modules_to_not_convert names that has no SDNQ
// scale (sdnq did not quantize it: someone cast it), is left to the other layouts' detection.
void detect_sdnq(Builder & b, const SdnqConfig & cfg) {
    for (const auto * t : b.store.tensors()) {
        if (!t->name.ends_with(".weight") || is_float(t->dtype)) continue;
        const std::string p = prefix_of(t->name, ".weight");
        if (!b.get(p + ".scale") && ((is_fp8(t->dtype) && (b.get(p + ".weight_scale") || b.get(p + ".scale_weight"))) ||
                                     !cfg.converted(p)))
            continue;
        const auto dtype = cfg.dtype_of(p);
        const std::string where = p + " in " + b.store.file_path(t->file_index).string();
        const SdnqParts parts{sdnq_part(t), sdnq_part(b.get(p + ".scale")), sdnq_part(b.get(p + ".zero_point")),
                              sdnq_part(b.get(p + ".svd_up")), sdnq_part(b.get(p + ".svd_down"))};
        if (!parts.scale) check_sdnq_parts(parts, {dtype}, 0, 0, p, where);  // throws, naming P.scale
        const auto [out, in] = sdnq_dense_shape(t->shape, parts.scale->shape, dtype, where);
        auto e = b.make(t->name, Encoding::sdnq, "SDNQ " + dtype.name, {out, in});
        e.sdnq = cfg.layer(p, out, in, parts.scale->shape.size() == 3);
        check_sdnq_parts(parts, e.sdnq, out, in, p, where);
        b.part(e, t->name, "data");
        b.part(e, p + ".scale", "scale");
        b.part(e, p + ".zero_point", "zero_point");
        b.part(e, p + ".svd_up", "svd_up");
        b.part(e, p + ".svd_down", "svd_down");
        b.add(std::move(e));
    }
}

std::string shape_str(const std::vector<std::int64_t> & v) {
    std::string t = "[";
    for (std::size_t i = 0; i < v.size(); ++i) t += (i ? "," : "") + std::to_string(v[i]);
    return t + "]";
}

// An fp8 weight's scale as every fp8 reader ddo follows takes it: floating, and one value, one per row or one per block
// (each of its dims dividing the weight's). Anything else would broadcast into another decoding, or fail mid-run.
void check_fp8_scale(const Builder & b, const TensorInfo & w, const TensorInfo & s) {
    bool ok = is_float(s.dtype);
    if (ok && s.numel() != 1) {
        ok = s.shape.size() == w.shape.size();
        for (std::size_t i = 0; ok && i < s.shape.size(); ++i) ok = s.shape[i] > 0 && w.shape[i] % s.shape[i] == 0;
        // One per column ([1, in]) is no fp8 writer's layout: a per-row scale stored transposed, which on a square
        // weight would divide and decode as the wrong scales.
        if (ok && w.shape.size() == 2 && w.shape[0] > 1 && s.shape[0] == 1 && s.shape[1] == w.shape[1]) ok = false;
    }
    if (!ok)
        throw RuntimeError(b.store.file_path(s.file_index).string() + ": the scale " + s.name + " " + shape_str(s.shape) +
                           " " + std::string(dtype_name(s.dtype)) + " of fp8 tensor " + w.name + " " + shape_str(w.shape) +
                           " is not a floating one value, one per row or one per block; the file is damaged - re-export it");
}

void detect_torchao(Builder & b) {
    for (const auto & f : b.store.files()) {
        for (const auto & [stored_logical, desc] : f.metadata()) {
            std::string logical = stored_logical;
            if (logical == "tensor_names" || logical == "format") continue;
            nlohmann::json j;
            try {
                j = nlohmann::json::parse(desc);
            } catch (const nlohmann::json::exception &) {
                continue;  // not a torchao entry
            }
            if (!j.is_object() || !j.contains("_type")) continue;
            const auto type = j.at("_type").get<std::string>();
            if (type == "Tensor") continue;
            const auto offered = b.store.offered_name(logical);  // a replacing file's names, as the store offers them
            if (!offered) continue;                                 // another component's tensor
            logical = *offered;
            if (type != "Float8Tensor")
                throw UsageError(f.path().string() + ": tensor '" + logical + "' is a TorchAO " + type +
                                 "; ddo decodes TorchAO Float8Tensor weights only - re-quantize with Float8WeightOnlyConfig");
            const std::string p = prefix_of(logical, ".weight");
            const auto * q = b.get(p + "._weight_qdata");
            if (!q || !b.get(p + "._weight_scale"))
                throw RuntimeError(f.path().string() + ": TorchAO tensor '" + logical + "' has no " +
                                   (q ? p + "._weight_scale" : p + "._weight_qdata") +
                                   "; the file is incomplete - re-save it with torchao");
            if (!is_fp8(q->dtype))
                throw RuntimeError(f.path().string() + ": TorchAO Float8Tensor '" + logical + "' stores " + q->name + " as " +
                                   std::string(dtype_name(q->dtype)) + ", not F8_E4M3 or F8_E5M2; the file is damaged - re-save it with torchao");
            check_fp8_scale(b, *q, *b.get(p + "._weight_scale"));
            auto e = b.make(logical, Encoding::fp8_fp32_scale, "TorchAO FP8 " + fp8_name(q->dtype), q->shape);
            b.part(e, q->name, "data");
            b.part(e, p + "._weight_scale", "scale");
            b.add(std::move(e));
        }
    }
}

void detect_fp8(Builder & b) {
    const bool comfy_legacy = b.get("scaled_fp8") != nullptr;
    const auto scale_of = [&](const std::string & p) {
        const auto * s = b.get(p + ".weight_scale");
        return s ? s : b.get(p + ".scale_weight");
    };
    const auto candidate = [&](const TensorInfo * t) {
        return is_fp8(t->dtype) && !b.consumed.count(t->name) && !b.out.count(t->name) && t->numel() > 0;
    };
    const auto prefix = [](const TensorInfo * t) { return t->name.ends_with(".weight") ? prefix_of(t->name, ".weight") : t->name; };
    // A scaled file whose weights all carry a scale: one without is a dropped scale, not an unscaled cast (its values
    // would be off by the scale, a white image with no error). Refused naming it.
    const TensorInfo * scaled = nullptr;
    for (const auto * t : b.store.tensors())
        if (candidate(t) && scale_of(prefix(t))) scaled = t;
    for (const auto * t : b.store.tensors()) {
        if (!candidate(t) || scale_of(prefix(t))) continue;
        for (const char * marker : {".input_scale", ".scale_input", ".comfy_quant"})  // a scaled layer's companions
            if (b.get(prefix(t) + marker))
                throw RuntimeError(b.store.file_path(t->file_index).string() + ": fp8 tensor " + t->name + " has " +
                                   prefix(t) + marker + " but no " + prefix(t) +
                                   ".weight_scale (or .scale_weight): the layer was saved scaled and its scale is missing - "
                                   "re-export the checkpoint");
    }
    for (const auto * t : b.store.tensors())
        if (candidate(t) && (scaled || comfy_legacy) && !scale_of(prefix(t)))
            throw RuntimeError(b.store.file_path(t->file_index).string() + ": fp8 tensor " + t->name + " has no " +
                               prefix(t) + ".weight_scale (or .scale_weight), while " +
                               (scaled ? "fp8 tensors of the same file have one (" + scaled->name + ")"
                                       : std::string("the file is marked scaled_fp8")) +
                               ": a scale is missing - re-export the checkpoint");
    for (const auto * t : b.store.tensors()) {
        if (!candidate(t)) continue;
        const std::string p = prefix(t);
        const bool comfy = comfy_legacy || b.get(p + ".comfy_quant") || b.get(p + ".scale_weight");
        const auto * s = scale_of(p);
        if (s) check_fp8_scale(b, *t, *s);
        auto e = b.make(t->name, !s ? Encoding::fp8_cast : comfy ? Encoding::fp8_compute_scale : Encoding::fp8_fp32_scale,
                        "FP8 " + fp8_name(t->dtype) + (s ? " scaled" : ""), t->shape);
        b.part(e, t->name, "data");
        if (s) b.part(e, s->name, "scale");
        b.add(std::move(e));
        for (const char * extra : {".input_scale", ".scale_input", ".comfy_quant"})
            if (const auto * x = b.get(p + extra)) b.consumed.insert(x->name);
    }
    if (comfy_legacy) b.consumed.insert("scaled_fp8");
}

// A GGUF store: each block-quantized tensor is its stored bytes (U8) decoded by its GGML type; plain types are dense.
void detect_gguf(Builder & b) {
    for (const auto * t : b.store.tensors()) {
        const auto * g = b.store.gguf_tensor(*t);
        if (!g || t->dtype != DType::u8) continue;  // plain GGML types are stored as themselves
        auto e = b.make(t->name, Encoding::ggml, ggml_type_label(g->type), g->shape);
        e.ggml_type = g->type;
        b.part(e, t->name, "data");
        b.add(std::move(e));
    }
}

}  // namespace

std::uint64_t EncodedTensor::stored_bytes() const noexcept {
    std::uint64_t n = 0;
    for (const auto * p : parts) n += p->nbytes;
    return n;
}

const TensorInfo * EncodedTensor::part(std::string_view role) const noexcept {
    for (std::size_t i = 0; i < roles.size(); ++i)
        if (roles[i] == role) return parts[i];
    return nullptr;
}

ComponentEncodings ComponentEncodings::detect(const WeightStore & store) {
    ComponentEncodings c;
    Builder b{store, {}, {}};
    auto [qc, qfile] = quantization_config(store);
    if (!qc.is_null()) {
        const auto method = qc.is_object() ? qc.value("quant_method", std::string()) : std::string();
        c.method_ = method;
        c.config_ = std::make_shared<const nlohmann::json>(qc);
        if (method == "sdnq") detect_sdnq(b, SdnqConfig::from_json(qc, qfile));
        else if (method != "torchao")
            throw UsageError(qfile.string() + ": quantization_config.quant_method = \"" + method +
                             "\" is not one ddo reads (sdnq, torchao; GGUF and scaled fp8 files need no config); "
                             "use an SDNQ, TorchAO, fp8 or GGUF checkpoint");
    }
    if (store.gguf()) detect_gguf(b);
    detect_torchao(b);  // self-described by each file's __metadata__, with or without the folder's config
    detect_fp8(b);
    for (const auto * t : store.tensors()) {
        if (b.consumed.count(t->name) || b.out.count(t->name)) continue;
        auto e = b.make(t->name, Encoding::dense, std::string(dtype_name(t->dtype)), t->shape);
        e.parts = {t};
        e.roles = {"data"};
        b.out.emplace(t->name, std::move(e));
    }
    for (const auto & [n, e] : b.out) c.quantized_ = c.quantized_ || e.encoding != Encoding::dense;
    if (store.gguf()) c.method_ = c.quantized_ ? "gguf" : "";  // an F32/F16/BF16 GGUF is dense
    if (c.method_.empty() && c.quantized_) {
        bool torchao = false;
        for (const auto & [n, e] : b.out) torchao = torchao || e.format.rfind("TorchAO", 0) == 0;
        c.method_ = torchao ? "torchao" : "fp8";
    }
    c.tensors_ = std::move(b.out);
    return c;
}

const EncodedTensor * ComponentEncodings::find(std::string_view name) const noexcept {
    const auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::string> ComponentEncodings::names() const {
    std::vector<std::string> r;
    for (const auto & [n, e] : tensors_) r.push_back(n);
    return r;
}

nlohmann::json ComponentEncodings::summary(const std::vector<std::string> & names, std::uint32_t dense_element_size) const {
    nlohmann::json formats = nlohmann::json::object();
    std::uint64_t stored = 0, dense = 0;
    auto count = [&](const EncodedTensor & e) {
        formats[e.format] = formats.value(e.format, 0) + 1;
        stored += e.stored_bytes();
        std::uint64_t numel = 1;
        for (auto d : e.shape) numel *= std::uint64_t(d);
        dense += e.encoding == Encoding::dense ? e.stored_bytes() : numel * dense_element_size;
    };
    if (names.empty()) {
        for (const auto & [n, e] : tensors_) count(e);
    } else {
        for (const auto & n : names)
            if (const auto * e = find(n)) count(*e);
    }
    return {{"method", method_.empty() ? nlohmann::json(nullptr) : nlohmann::json(method_)},
            {"formats", formats},
            {"stored_bytes", stored},
            {"dense_bytes", dense},
            {"config", config_ ? *config_ : nlohmann::json(nullptr)}};
}

}  // namespace ddo::store
