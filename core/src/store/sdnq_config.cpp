#include "ddo/store/sdnq_config.hpp"

#include <algorithm>
#include <limits>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"

namespace ddo::store {

namespace {

std::string where(const std::filesystem::path & file, const std::string & key) {
    return file.string() + ": quantization_config." + key;
}

bool json_bool(const nlohmann::json & qc, const std::string & key, bool dflt, const std::filesystem::path & file) {
    const auto it = qc.find(key);
    if (it == qc.end() || it->is_null()) return dflt;
    if (!it->is_boolean()) throw RuntimeError(where(file, key) + " must be true or false");
    return it->get<bool>();
}

std::vector<std::string> json_strings(const nlohmann::json & v, const std::string & what) {
    std::vector<std::string> out;
    if (v.is_null()) return out;
    if (!v.is_array()) throw RuntimeError(what + " must be a list of strings");
    for (const auto & s : v) {
        if (!s.is_string()) throw RuntimeError(what + " must be a list of strings");
        out.push_back(s.get<std::string>());
    }
    return out;
}

// A set option ddo does not decode: refused naming the key.
void refuse_if_set(const nlohmann::json & qc, const std::string & key, const std::filesystem::path & file,
                   const std::string & what) {
    const auto it = qc.find(key);
    if (it == qc.end() || it->is_null()) return;
    const bool set = it->is_boolean() ? it->get<bool>()
                     : it->is_string() ? (it->get<std::string>() != "none" && !it->get<std::string>().empty())
                     : it->is_object() || it->is_array() ? !it->empty()
                                                          : true;
    if (set)
        throw UsageError(where(file, key) + " = " + it->dump() + ": " + what +
                         " is not decoded by ddo yet; re-quantize without it (sdnq: " + key + "=" +
                         (it->is_boolean() ? "False" : "None") + ")");
}

}  // namespace

SdnqDtype sdnq_dtype(const std::string & name, const std::string & where) {
    if (name == "int8") return {name, 8, true, false, false};
    if (name == "uint8") return {name, 8, true, true, false};
    if (name == "int4") return {name, 4, true, false, true};
    if (name == "uint4") return {name, 4, true, true, true};
    if (name == "float8_e4m3fn" || name == "float8_e5m2") return {name, 8, false, false, false};
    throw UsageError(where + " = \"" + name +
                     "\": ddo decodes the SDNQ weight dtypes int8, uint8, int4, uint4, float8_e4m3fn and float8_e5m2; "
                     "re-quantize with one of them");
}

bool sdnq_name_matches(const std::string & name, const std::vector<std::string> & patterns) {
    std::vector<std::string> parts;
    std::stringstream ss(name);
    for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
    for (const auto & p : patterns) {
        if (!p.empty() && p[0] == '.') {
            if (name.rfind(p.substr(1), 0) == 0) return true;
            continue;
        }
        if (name == p || std::find(parts.begin(), parts.end(), p) != parts.end()) return true;
        if (p.find('*') != std::string::npos) {
            // sdnq: re.match(p.replace(".*", "\\.*").replace("*", ".*"), name): ".*" becomes "\..*", any other
            // "*" becomes ".*", the rest stays regex; matched at the start of the name.
            std::string rx;
            for (std::size_t i = 0; i < p.size(); ++i) {
                if (p[i] == '.' && i + 1 < p.size() && p[i + 1] == '*') {
                    rx += "\\..*";
                    ++i;
                } else {
                    rx += p[i] == '*' ? std::string(".*") : std::string(1, p[i]);
                }
            }
            try {
                std::smatch m;
                if (std::regex_search(name, m, std::regex(rx), std::regex_constants::match_continuous)) return true;
            } catch (const std::regex_error &) {  // sdnq's re.match would raise; such a pattern matches nothing here
            }
        }
    }
    return false;
}

SdnqConfig SdnqConfig::from_json(const nlohmann::json & qc, const std::filesystem::path & file) {
    if (!qc.is_object()) throw RuntimeError(file.string() + ": quantization_config must be an object");
    const auto method = qc.value("quant_method", std::string());
    if (method != "sdnq")
        throw UsageError(where(file, "quant_method") + " = \"" + method + "\": this reader takes SDNQ checkpoints");
    SdnqConfig c;
    c.version_ = qc.value("sdnq_version", std::string("unknown"));
    if (!qc.contains("weights_dtype") || !qc.at("weights_dtype").is_string())
        throw RuntimeError(where(file, "weights_dtype") + " is missing: the SDNQ config names the weights' dtype");
    c.weights_dtype_ = qc.at("weights_dtype").get<std::string>();
    (void)sdnq_dtype(c.weights_dtype_, where(file, "weights_dtype"));
    if (const auto it = qc.find("quantized_matmul_dtype"); it != qc.end() && !it->is_null()) c.matmul_dtype_ = it->get<std::string>();
    refuse_if_set(qc, "use_codebook", file, "a codebook (Lloyd-Max) layer");
    refuse_if_set(qc, "use_codebook_scale", file, "a codebook scale");
    refuse_if_set(qc, "scale_dtype", file, "a double-quantized scale");
    refuse_if_set(qc, "zero_point_dtype", file, "a double-quantized zero point");
    refuse_if_set(qc, "modules_quant_config", file, "a per-module quantization override");
    c.use_quantized_matmul_ = json_bool(qc, "use_quantized_matmul", false, file);
    c.use_hadamard_ = json_bool(qc, "use_hadamard", false, file);
    c.dequantize_fp32_ = json_bool(qc, "dequantize_fp32", true, file);
    if (const auto it = qc.find("hadamard_group_size"); it != qc.end() && !it->is_null()) {
        if (!it->is_number_integer() || it->get<std::int64_t>() < 1)
            throw RuntimeError(where(file, "hadamard_group_size") + " must be a positive integer");
        c.hadamard_group_size_ = it->get<std::int64_t>();
    }
    c.not_convert_ = json_strings(qc.value("modules_to_not_convert", nlohmann::json()), where(file, "modules_to_not_convert"));
    c.not_use_matmul_ = json_strings(qc.value("modules_to_not_use_matmul", nlohmann::json()), where(file, "modules_to_not_use_matmul"));
    if (const auto it = qc.find("modules_dtype_dict"); it != qc.end() && !it->is_null()) {
        if (!it->is_object()) throw RuntimeError(where(file, "modules_dtype_dict") + " must be an object");
        for (const auto & [dtype, names] : it->items()) {
            (void)sdnq_dtype(dtype, where(file, "modules_dtype_dict") + " key");
            c.modules_dtype_[dtype] = json_strings(names, where(file, "modules_dtype_dict." + dtype));
        }
    }
    return c;
}

bool SdnqConfig::converted(const std::string & layer) const { return !sdnq_name_matches(layer, not_convert_); }

SdnqDtype SdnqConfig::dtype_of(const std::string & layer) const {
    std::string dtype = weights_dtype_;
    for (const auto & [d, names] : modules_dtype_)
        if (sdnq_name_matches(layer, names)) dtype = d;
    return sdnq_dtype(dtype, "the SDNQ dtype of layer " + layer);
}

SdnqLayerRule SdnqConfig::layer(const std::string & layer, std::int64_t out, std::int64_t in, bool grouped) const {
    SdnqLayerRule r;
    r.dtype = dtype_of(layer);
    const std::string & dtype = r.dtype.name;
    r.fp32 = dequantize_fp32_;
    // check_quantized_matmul_is_allowed (Linear layers)
    r.quantized_matmul = use_quantized_matmul_ && !sdnq_name_matches(layer, not_use_matmul_) && out >= 32 && in >= 32 &&
                         out % 16 == 0 && in % 16 == 0;
    // get_quantized_matmul_dtype and re_quantize_for_matmul, for the dtypes decoded here.
    std::string mm = matmul_dtype_;
    if (mm.empty()) mm = r.dtype.integer ? (dtype == "uint8" ? "uint8" : "int8") : "float8_e4m3fn";
    const bool mm_integer = mm == "int8" || mm == "uint8";
    const int mm_bits = (mm == "float16" || mm == "fp16") ? 16 : 8;
    const bool re_quantize = grouped || r.dtype.bits > mm_bits || r.dtype.integer != mm_integer ||
                             (r.dtype.is_unsigned && !mm_integer);
    r.transposed = r.quantized_matmul && !re_quantize && !r.dtype.packed;
    if (use_hadamard_) {  // get_hadamard_group_size
        std::int64_t g = 1;
        while (g < std::min(in, hadamard_group_size_)) g *= 2;
        while (g > 1 && in % g != 0) g /= 2;
        r.hadamard_group = g >= 4 ? g : 0;
    }
    return r;
}

namespace {

std::string shape_text(const std::vector<std::int64_t> & shape) {
    std::string out = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
    return out + "]";
}

[[noreturn]] void disagree(const std::string & name, const std::string & what) {
    throw RuntimeError("SDNQ layer " + name + ": " + what +
                       "; the quantization_config does not match the tensors - re-save the checkpoint with sdnq");
}

bool floating(DType d) { return d == DType::f16 || d == DType::bf16 || d == DType::f32 || d == DType::f64; }

// The weight's stored dtype for the layer's SDNQ dtype.
DType stored_dtype(const SdnqDtype & d) {
    if (!d.integer) return d.name == "float8_e5m2" ? DType::f8_e5m2 : DType::f8_e4m3;
    return d.is_unsigned || d.packed ? DType::u8 : DType::i8;
}

std::string part_text(const SdnqPart & p) { return shape_text(p.shape) + " " + std::string(dtype_name(p.dtype)); }

}  // namespace

void check_sdnq_parts(const SdnqParts & t, const SdnqLayerRule & rule, std::int64_t out, std::int64_t in,
                      const std::string & layer, const std::string & name) {
    const auto missing = [&](const char * part, const std::string & why) {
        throw RuntimeError("SDNQ layer " + name + ": " + layer + "." + part + " is missing (" + why +
                           "); the file is damaged or incomplete - re-save the checkpoint with sdnq");
    };
    if (!t.weight) missing("weight", "every quantized layer stores its weight");
    if (!t.scale) missing("scale", "its weight is " + part_text(*t.weight) + ", " + rule.dtype.name + " values that mean nothing without their scale");
    const auto & w = *t.weight;
    const auto & s = *t.scale;
    if (out <= 0 || in <= 0)
        disagree(name, "weight " + part_text(w) + " and scale " + part_text(s) + " hold an empty [" + std::to_string(out) +
                           "," + std::to_string(in) + "] layer");
    if (!floating(s.dtype)) disagree(name, "scale " + part_text(s) + " is not a floating-point tensor");
    const bool grouped = s.shape.size() == 3;
    const std::int64_t groups = grouped ? s.shape[1] : 1;
    if (groups <= 0 || in % groups != 0) disagree(name, "scale " + shape_text(s.shape) + " does not divide " + std::to_string(in) + " columns");
    const auto sshape = grouped ? std::vector<std::int64_t>{out, groups, 1}
                        : rule.transposed ? std::vector<std::int64_t>{1, out}
                                          : std::vector<std::int64_t>{out, 1};
    if (s.shape != sshape && s.shape != std::vector<std::int64_t>{1, 1})  // [1, 1]: one scale for the layer
        disagree(name, "scale " + shape_text(s.shape) + ", expected " + shape_text(sshape) + " for " + rule.dtype.name +
                           (rule.transposed ? " (transposed: quantized matmul)" : ""));
    if (rule.dtype.is_unsigned && !t.zero_point)
        missing("zero_point", "an unsigned " + rule.dtype.name + " layer is decoded as zero_point + q * scale");
    if (!rule.dtype.is_unsigned && t.zero_point)
        disagree(name, "a signed " + rule.dtype.name + " layer has no zero_point, the file has one");
    if (t.zero_point && (t.zero_point->shape != s.shape || !floating(t.zero_point->dtype)))
        disagree(name, "zero_point " + part_text(*t.zero_point) + " is not a floating tensor of the scale's shape " + shape_text(s.shape));
    const auto want = stored_dtype(rule.dtype);
    if (rule.dtype.packed) {
        if (w.dtype != want || w.shape.size() != 1 || w.shape[0] * 2 != out * in)
            disagree(name, "packed " + rule.dtype.name + " weight " + part_text(w) + " does not hold " + std::to_string(out) +
                               "x" + std::to_string(in) + " values");
    } else {
        const auto wshape = rule.transposed ? std::vector<std::int64_t>{in, out}
                            : grouped       ? std::vector<std::int64_t>{out, groups, in / groups}
                                            : std::vector<std::int64_t>{out, in};
        if (w.dtype != want || w.shape != wshape)
            disagree(name, "weight " + part_text(w) + ", expected " + shape_text(wshape) + " " + std::string(dtype_name(want)) +
                               " (" + rule.dtype.name + ")");
    }
    if (t.svd_up.has_value() != t.svd_down.has_value())
        missing(t.svd_up ? "svd_down" : "svd_up", std::string("the low-rank correction is svd_up x svd_down; the file has ") +
                                                      (t.svd_up ? "svd_up" : "svd_down") + " alone");
    if (t.svd_up) {
        const auto & u = t.svd_up->shape;
        const auto & d = t.svd_down->shape;
        const bool qmm = rule.quantized_matmul;
        const bool ok = u.size() == 2 && d.size() == 2 && floating(t.svd_up->dtype) && floating(t.svd_down->dtype) &&
                        (qmm ? (u[1] == out && d[0] == in && u[0] == d[1]) : (u[0] == out && d[1] == in && u[1] == d[0]));
        if (!ok)
            disagree(name, "svd_up " + part_text(*t.svd_up) + " and svd_down " + part_text(*t.svd_down) + " do not form [" +
                               std::to_string(out) + "," + std::to_string(in) + "]" + (qmm ? " (stored transposed: quantized matmul)" : ""));
    }
    if (rule.hadamard_group > 0 && in % rule.hadamard_group != 0)
        disagree(name, "the Hadamard group " + std::to_string(rule.hadamard_group) + " does not divide " + std::to_string(in));
}

std::pair<std::int64_t, std::int64_t> sdnq_dense_shape(const std::vector<std::int64_t> & w,
                                                       const std::vector<std::int64_t> & s, const SdnqDtype & dtype,
                                                       const std::string & name) {
    if (dtype.packed) {
        if (w.size() != 1 || s.size() < 2)
            disagree(name, "a packed " + dtype.name + " weight is 1-D with a [out, ...] scale, found weight " +
                               shape_text(w) + " and scale " + shape_text(s));
        const std::int64_t out = s[0];
        if (w[0] < 0 || w[0] > std::numeric_limits<std::int64_t>::max() / 8)
            disagree(name, "weight " + shape_text(w) + " is out of range");
        const std::int64_t values = w[0] * (8 / dtype.bits);
        if (out <= 0 || values % out != 0)
            disagree(name, "weight " + shape_text(w) + " does not divide into " + std::to_string(out) + " rows");
        return {out, values / out};
    }
    if (w.size() == 3) return {w[0], w[1] * w[2]};
    if (w.size() != 2)
        disagree(name, "weight " + shape_text(w) + " is neither [out, in], [in, out] nor [out, groups, size]");
    const bool transposed = s.size() == 2 && s[0] == 1 && s[1] == w[1] && w[1] > 1;
    return transposed ? std::pair{w[1], w[0]} : std::pair{w[0], w[1]};
}

}  // namespace ddo::store
