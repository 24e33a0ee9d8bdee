#include "ddo/model/lora_adapters.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <set>

#include "ddo/error.hpp"
#include "ddo/store/checkpoint_identity.hpp"
#include "ddo/store/component_source.hpp"
#include "ddo/torch/tensor_views.hpp"

namespace ddo::model {

namespace {

bool known_component(const std::string & s) {
    static const std::set<std::string> known = {"transformer", "text_encoder", "connectors"};
    return known.count(s) != 0;
}

std::optional<double> number(const std::string & s) {
    if (s.empty()) return std::nullopt;
    char * end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
    return v;
}

// A factor of the file as an fp32 tensor on the host.
at::Tensor read_factor(const store::LoraFile & lora, const store::TensorInfo & info) {
    auto t = at::empty(info.shape, at::TensorOptions().dtype(ddo::torch::to_scalar_type(info.dtype)));
    lora.file().read_tensor(info, t.data_ptr(), store::ReadMode::pread);
    return t.to(at::kFloat);
}

std::string alpha_policy(const store::LoraLayer & l) {
    if (!l.alpha) return "none: scale = strength";
    return l.rslora ? "alpha / sqrt(rank)" : "alpha / rank";
}

}  // namespace

LoraRequest parse_lora_request(const std::string & text, const std::string & key) {
    LoraRequest r;
    std::string path = text;
    // From the right: [:COMPONENT] after a [:STRENGTH]; a path may itself hold ':'.
    const auto last = path.rfind(':');
    if (last != std::string::npos) {
        const std::string tail = path.substr(last + 1);
        const auto before = path.rfind(':', last == 0 ? std::string::npos : last - 1);
        if (known_component(tail) && before != std::string::npos && number(path.substr(before + 1, last - before - 1))) {
            r.component = tail;
            r.strength = *number(path.substr(before + 1, last - before - 1));
            path.resize(before);
        } else if (auto s = number(tail)) {
            r.strength = *s;
            path.resize(last);
        } else if (!tail.empty() && tail.find('/') == std::string::npos && tail.find('.') == std::string::npos) {
            throw UsageError(key + " '" + text + "': '" + tail + "' is no strength (a finite number); write "
                             "PATH[:STRENGTH[:COMPONENT]], e.g. style.safetensors:0.8");
        }
    }
    if (path.empty())
        throw UsageError(key + " '" + text + "': no file; write PATH[:STRENGTH[:COMPONENT]], e.g. style.safetensors:0.8");
    r.path = path;
    return r;
}

const LoraDelta * ComponentLora::find(std::string_view weight) const {
    const auto it = deltas.find(std::string(weight));
    return it == deltas.end() ? nullptr : &it->second;
}

const LoraDelta * ComponentLora::attach(std::string_view weight, const at::Tensor & on) {
    const auto it = deltas.find(std::string(weight));
    if (it == deltas.end()) return nullptr;
    auto & d = it->second;
    if (d.down.device() != on.device() || d.up.device() != on.device()) {
        d.down = d.down.to(on.device());
        d.up = d.up.to(on.device());
        ++moved;
    }
    d.handed_out = true;
    return &d;
}

nlohmann::json ComponentLora::to_json() const {
    std::uint64_t applied = 0, merged = 0;
    std::vector<std::string> not_applied;
    for (const auto & [w, d] : deltas) {
        applied += d.applied > 0;
        merged += d.merged;
        if (d.handed_out && d.applied == 0 && !d.merged) not_applied.push_back(w);
    }
    std::sort(not_applied.begin(), not_applied.end());
    const std::string how = merged == 0 ? "runtime" : applied == 0 ? "merged" : "merged and runtime";
    std::string reason = "runtime: the low-rank term (x A^T) B^T is added to each adapted Linear's output at every call; "
                         "the stored weights are not changed";
    if (merge)
        reason = "lora.apply = merge: B A added once into the weights of resident groups (" + std::to_string(merged) +
                 " modules, a merged copy in the compute dtype); the modules of streamed groups and of weights the "
                 "plugin holds outside the engine stay at run time (" + std::to_string(applied) + ")";
    return {{"how", how},
            {"how_reason", reason},
            {"modules", deltas.size()},
            {"bytes", bytes},
            {"read_s", read_s},
            {"applied", applied},
            {"merged", merged},
            {"merged_bytes", merged_bytes},
            {"merge_s", merge_s},
            {"moved_to_weight_device", moved},
            {"not_applied", not_applied}};
}

LoraAdapters LoraAdapters::open(const std::vector<LoraRequest> & requests) {
    LoraAdapters out;
    for (const auto & r : requests) {
        auto lora = store::LoraFile::open(r.path);  // validates; names the file on every error
        store::IdentityOptions o;
        o.hash_weights = true;  // LoRA files are small next to a checkpoint: always hashed
        auto identity = store::file_identity(r.path, o);
        identity["file"] = std::filesystem::absolute(r.path).string();
        out.files_.push_back(File{r, std::move(lora), std::move(identity), {}});
    }
    return out;
}

void LoraAdapters::match(const std::string & component, const store::ComponentEncodings & encodings,
                         const std::vector<std::pair<std::string, std::string>> & renames) {
    std::map<std::string, std::vector<std::int64_t>> modules;
    for (const auto & n : encodings.names()) {
        const auto * e = encodings.find(n);
        if (e && e->shape.size() == 2 && n.ends_with(".weight")) modules.emplace(n.substr(0, n.size() - 7), e->shape);
    }
    std::function<std::optional<std::string>(std::string_view)> rename;
    if (!renames.empty())
        rename = [&](std::string_view m) -> std::optional<std::string> {
            auto r = store::renamed(std::string(m) + ".weight", renames);
            return r.substr(0, r.size() - 7);
        };
    for (auto & f : files_)
        f.matches[component] = store::match_lora(f.lora, component, f.request.component == component, modules, rename);
}

std::vector<std::string> LoraAdapters::check(bool allow_unmatched) const {
    std::vector<std::string> lines;
    for (const auto & f : files_) {
        std::set<const store::LoraLayer *> matched;
        for (const auto & [c, m] : f.matches)
            for (const auto & [l, module] : m.matched) matched.insert(l);
        std::vector<std::string> unmatched;
        for (const auto & l : f.lora.layers()) {
            if (matched.count(&l)) continue;
            const std::string c = l.component.empty() ? f.request.component : l.component;
            unmatched.push_back(f.matches.count(c) ? (c + ":" + l.module)
                                                   : (c + ":" + l.module + " (this run does not read the " + c + ")"));
        }
        if (unmatched.empty()) continue;
        std::string first;
        for (std::size_t i = 0; i < std::min<std::size_t>(5, unmatched.size()); ++i) first += (i ? ", " : "") + unmatched[i];
        lines.push_back(f.request.path.string() + ": " + std::to_string(unmatched.size()) + " of " +
                        std::to_string(f.lora.layers().size()) + " modules adapt nothing in this " + "run (first: " +
                        first + "); " + std::to_string(matched.size()) + " matched");
    }
    if (!allow_unmatched && !lines.empty()) {
        std::string msg;
        for (const auto & l : lines) msg += (msg.empty() ? "" : "; ") + l;
        throw UsageError(msg + ". Is the LoRA for this model (and this component)? To run with only the modules that "
                               "match, set lora.allow_unmatched = true (--lora-allow-unmatched)");
    }
    return lines;
}

std::shared_ptr<ComponentLora> LoraAdapters::load(const std::string & component, at::ScalarType dtype,
                                                  c10::Device device, bool merge) const {
    const auto t0 = std::chrono::steady_clock::now();
    // module weight -> the factors of each file that adapts it, in the order the files were given.
    std::map<std::string, std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>>> parts;
    for (const auto & f : files_) {
        const auto it = f.matches.find(component);
        if (it == f.matches.end()) continue;
        for (const auto & [l, module] : it->second.matched) {
            auto & p = parts[module + ".weight"];
            p.first.push_back(read_factor(f.lora, *l->down));
            p.second.push_back(read_factor(f.lora, *l->up) * l->scale(f.request.strength));
        }
    }
    if (parts.empty()) return nullptr;
    auto out = std::make_shared<ComponentLora>();
    out->component = component;
    out->merge = merge;
    const auto opts = at::TensorOptions().dtype(dtype).device(device);
    for (auto & [w, p] : parts) {
        LoraDelta d;
        d.weight = w;
        d.down = at::cat(p.first, 0).to(opts).contiguous();
        d.up = at::cat(p.second, 1).to(opts).contiguous();
        out->bytes += std::uint64_t(d.down.nbytes() + d.up.nbytes());
        out->deltas.emplace(w, std::move(d));
    }
    out->read_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
}

nlohmann::json LoraAdapters::to_json() const {
    auto all = nlohmann::json::array();
    for (const auto & f : files_) {
        std::set<std::int64_t> ranks;
        std::set<std::string> policies;
        for (const auto & l : f.lora.layers()) {
            ranks.insert(l.rank);
            policies.insert(alpha_policy(l));
        }
        nlohmann::json matched = nlohmann::json::object();
        std::size_t n_matched = 0;
        for (const auto & [c, m] : f.matches) {
            matched[c] = m.matched.size();
            n_matched += m.matched.size();
        }
        all.push_back({{"path", f.request.path.string()},
                       {"identity", f.identity},
                       {"format", f.lora.format()},
                       {"strength", f.request.strength},
                       {"bare_keys_component", f.request.component},
                       {"modules", f.lora.layers().size()},
                       {"ranks", ranks},
                       {"alpha", policies},
                       {"matched", matched},
                       {"unmatched", f.lora.layers().size() - n_matched}});
    }
    return all;
}

}  // namespace ddo::model
