// The reading half of `ddo-host report summarize | diff` (host/cmd_report.cpp): run reports (docs/metrics.md) from
// untrusted JSON, also fuzzed (tests/fuzz/report_reader_fuzz.cpp).
#include "report_reader.hpp"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <set>

#include "byte_text.hpp"
#include "ddo/error.hpp"

namespace ddo::host {

using nlohmann::json;

std::string json_text(const json & v) {
    if (v.is_null()) return "null";
    if (v.is_string()) return v.get<std::string>();
    return v.dump();
}

std::string json_bytes(const json & v) { return v.is_number() ? human_bytes(v.get<double>()) : "null"; }

json parse_report(std::string_view text, const std::string & name) {
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception & e) {
        throw UsageError("report " + name + ": not valid JSON (" + e.what() + "); was the file truncated?");
    }
    // A run report is an object with an integer schema_version and a status string (docs/metrics.md, "Run"): any
    // other JSON is refused rather than summarised as if it were one.
    const bool report = j.is_object() && j.contains("schema_version") && j["schema_version"].is_number_integer() &&
                        j.contains("status") && j["status"].is_string() && j.contains("phases") && j["phases"].is_array();
    if (!report)
        throw UsageError("report " + name + ": valid JSON, but not a ddo run report (no integer schema_version, status "
                         "string and phases list); pass the file written by ddo-host --report");
    return j;
}

json load_report(const std::string & path) {
    std::ifstream in(path);
    if (!in) throw UsageError("report " + path + ": cannot open; pass the JSON written by --report");
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    return parse_report(text, path);
}

namespace {

const json & at_path(const json & j, const std::string & dotted) {
    static const json null_json;
    const json * cur = &j;
    std::size_t pos = 0;
    while (pos <= dotted.size()) {
        auto dot = dotted.find('.', pos);
        auto part = dotted.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
        if (!cur->is_object() || !cur->contains(part)) return null_json;
        cur = &(*cur)[part];
        if (dot == std::string::npos) break;
        pos = dot + 1;
    }
    return *cur;
}

// A report's fields may be missing or of another type (an older, partial or hand-edited report): j[key] when j is an
// object that holds key, else null. (The const operator[] of nlohmann::json is undefined for a missing key.)
const json & field(const json & j, std::string_view key) {
    static const json null_json;
    if (!j.is_object()) return null_json;
    const auto it = j.find(key);
    return it == j.end() ? null_json : *it;
}
// field(j, key) when it is an object (an array), else an empty one.
const json & object_field(const json & j, std::string_view key) {
    static const json empty = json::object();
    const json & v = field(j, key);
    return v.is_object() ? v : empty;
}
const json & array_field(const json & j, std::string_view key) {
    static const json empty = json::array();
    const json & v = field(j, key);
    return v.is_array() ? v : empty;
}

std::string gib(const json & v) {
    if (!v.is_number()) return "null";
    char b[32];
    std::snprintf(b, sizeof b, "%.3f GiB", v.get<double>() / 1073741824.0);
    return b;
}

std::string secs(const json & v) {
    if (!v.is_number()) return "null";
    char b[32];
    std::snprintf(b, sizeof b, "%.3f s", v.get<double>());
    return b;
}

const char * kMonitors[] = {"rss", "uss", "mem_available", "cgroup", "gpu_absolute", "gpu_delta", "torch_allocated",
                            "torch_reserved"};

// One staging route: "pinned on: 2/2 ok, 80 KiB" or "registration off (reason): 0 attempts".
std::string staging_route(const json & hs, const char * route) {
    const json & c = object_field(hs, route);
    const json & lim = object_field(hs, "limits");
    std::string mode;
    if (std::string(route) == "pinned") {
        mode = lim.contains("pinned_route") ? json_text(field(lim, "pinned_route")) : "on";
        if (mode == "off" && !field(lim, "pinned_route_reason").is_null())
            mode += " (" + json_text(field(lim, "pinned_route_reason")) + ")";
    } else {
        mode = json_text(field(lim, "registration"));
    }
    return std::string(route) + " " + mode + ": " + json_text(field(c, "successes")) + "/" + json_text(field(c, "attempts")) +
           " ok, " + json_text(field(c, "refusals")) + " refused, " + json_text(field(c, "failures")) + " failed, " +
           json_bytes(field(c, "bytes_total"));
}

}  // namespace

std::string quantization_text(const json & counters, bool decode) {
    const json & q = field(counters, "quantization");
    if (!q.is_object() || !field(q, "method").is_string()) return {};
    std::string out = field(q, "method").get<std::string>() + ":";
    const json & formats = field(q, "formats");
    if (formats.is_object()) {
        bool first = true;
        for (const auto & [f, n] : formats.items()) {
            out += (first ? " " : ", ") + f + " " + json_text(n);
            first = false;
        }
    }
    out += "; stored " + json_bytes(field(q, "stored_bytes")) + " of " + json_bytes(field(q, "dense_bytes")) + " dense";
    if (!decode) return out;
    const json & conv = field(counters, "conversion");
    const bool once = field(conv, "once").is_boolean() && field(conv, "once").get<bool>();
    out += once ? "; decoded once, kept decoded" : "; decoded at each acquire";
    out += ", " + secs(field(q, "dequant_s")) + " over " + json_text(field(q, "dequant_count")) + " decodes";
    return out;
}

std::string lora_text(const json & counters, bool after_run) {
    const json & l = field(counters, "lora");
    if (!l.is_object()) return {};
    if (!after_run) return "LoRA " + json_text(field(l, "modules")) + " modules, factors " + json_bytes(field(l, "bytes"));
    std::string out = "LoRA " + json_text(field(l, "modules")) + " modules, " + json_text(field(l, "how"));
    out += " (" + json_text(field(l, "applied")) + " at run time";
    if (field(l, "merged").is_number() && field(l, "merged").get<double>() > 0)
        out += ", " + json_text(field(l, "merged")) + " merged (" + json_bytes(field(l, "merged_bytes")) + ")";
    out += "), factors " + json_bytes(field(l, "bytes"));
    const json & missing = field(l, "not_applied");
    if (missing.is_array() && !missing.empty()) out += "; NOT APPLIED: " + json_text(missing);
    return out;
}

std::vector<std::string> lora_files_text(const json & r) {
    std::vector<std::string> out;
    for (const auto & l : array_field(at_path(r, "identity.checkpoint"), "loras")) {
        std::string ranks, alpha, matched;
        for (const auto & k : array_field(l, "ranks")) ranks += (ranks.empty() ? "" : "/") + json_text(k);
        for (const auto & a : array_field(l, "alpha")) alpha += (alpha.empty() ? "" : ", ") + json_text(a);
        const json & m = field(l, "matched");
        if (m.is_object())
            for (const auto & [c, n] : m.items()) matched += ", " + c + " " + json_text(n) + " matched";
        const std::string sha = json_text(at_path(l, "identity.sha256"));
        out.push_back(json_text(field(l, "path")) + " (" + json_text(field(l, "format")) + ", rank " + ranks + ", " + alpha +
                      ") at " + json_text(field(l, "strength")) + ": " + json_text(field(l, "modules")) + " modules" +
                      matched + ", " + json_text(field(l, "unmatched")) + " unmatched, sha256 " + sha.substr(0, 12));
    }
    return out;
}

namespace {

// Components streamed by the offload engine (counters.<c>.engine): the plan, the bytes moved by source, the
// host staging routes and, when quantized, the formats and decode, a line each.
void streaming(const json & counters) {
    bool header = false;
    for (const auto & [c, e] : counters.items()) {
        if (!field(e, "engine").is_object()) continue;
        if (!header) std::cout << "\nSTREAMING (offload engine; bytes moved to the compute device, by source)\n";
        header = true;
        const json & en = field(e, "engine");
        const json & plan = object_field(en, "plan");
        const json & k = object_field(en, "counters");
        const json & groups = array_field(plan, "groups");
        std::map<std::string, int> by;
        for (const auto & g : groups) {
            const json & residency = field(g, "residency");
            ++by[residency.is_string() ? residency.get<std::string>() : "?"];
        }
        std::printf("  %-16s plan %s: %zu groups (%d resident, %d pinned, %d pageable, %d file), %s slots of %s\n",
                    c.c_str(), json_text(field(plan, "route")).c_str(), groups.size(), by["resident"], by["pinned"],
                    by["pageable"], by["file"], json_text(field(plan, "slots")).c_str(), json_bytes(field(plan, "slot_bytes")).c_str());
        const json & mv = object_field(k, "bytes_moved");
        std::printf("  %-16s moved resident %s, pinned %s, pageable %s, file %s; %s uploads, %s hits, %s misses, "
                    "stall %s\n",
                    "", json_bytes(field(mv, "resident")).c_str(), json_bytes(field(mv, "pinned")).c_str(),
                    json_bytes(field(mv, "pageable")).c_str(), json_bytes(field(mv, "file")).c_str(),
                    json_text(field(k, "uploads")).c_str(), json_text(field(k, "hits")).c_str(), json_text(field(k, "misses")).c_str(),
                    secs(field(k, "stall_s")).c_str());
        const json & hs = field(en, "host_staging");
        if (hs.is_object())
            std::printf("  %-16s staging (%s) %s; %s\n", "", json_text(field(hs, "backend")).c_str(),
                        staging_route(hs, "pinned").c_str(), staging_route(hs, "registration").c_str());
        else
            std::printf("  %-16s staging: none (%s)\n", "", json_text(field(en, "host_staging_reason")).c_str());
        if (const auto q = quantization_text(e); !q.empty()) std::printf("  %-16s quantized %s\n", "", q.c_str());
        if (const auto l = lora_text(e); !l.empty()) std::printf("  %-16s %s\n", "", l.c_str());
    }
}

// summarize_report's sections, in the order printed; each reads the report and prints one part.

// Status, identity and the tracked total.
void print_identity(const json & r) {
    std::cout << "status: " << json_text(field(r, "status")) << "  exit_code: " << json_text(field(r, "exit_code"));
    if (!field(r, "error").is_null()) std::cout << "  error: " << json_text(field(field(r, "error"), "message"));
    std::cout << "\n";
    std::cout << "plugin: " << json_text(at_path(r, "identity.plugin.name")) << "  preset: requested "
              << json_text(at_path(r, "identity.preset.requested")) << ", effective " << json_text(at_path(r, "identity.preset.effective"))
              << "\n";
    std::cout << "host: " << json_text(at_path(r, "identity.host.version")) << " (" << json_text(at_path(r, "identity.host.git_revision"))
              << ")  dry_run: " << json_text(field(r, "dry_run")) << "\n";
    std::cout << "tracked total (host clock): " << secs(at_path(r, "timing.tracked_total_host_s")) << "\n";
    for (const auto & l : lora_files_text(r)) std::cout << "lora: " << l << "\n";
}

// What ran: the workload, the adjustments, the outputs.
void print_what_ran(const json & r) {
    // The workload the plugin recorded (after its decisions), and what it changed from the request.
    std::string workload;
    const json wl = r.value("workload", json::object());  // named: items() must not iterate a temporary
    for (const auto & [k, v] : wl.items())
        if (!v.is_structured() && !v.is_null()) workload += (workload.empty() ? "" : ", ") + k + " " + json_text(v);
    std::cout << "workload: " << (workload.empty() ? "(none recorded)" : workload) << "\n";
    const json adjustments = r.value("adjustments", json::array()), outputs = r.value("outputs", json::array());
    for (const auto & a : adjustments)
        std::cout << "adjusted " << json_text(field(a, "key")) << ": requested " << field(a, "requested").dump() << ", ran "
                  << field(a, "effective").dump() << " (" << json_text(field(a, "reason")) << ")\n";
    for (const auto & o : outputs) {
        std::cout << "output: " << json_text(field(o, "path")) << "  sha256 " << json_text(field(o, "sha256")).substr(0, 16) << "\n";
        // What the file holds (media outputs: codecs, frames, duration), one level deep.
        std::string facts;
        const json & f = object_field(o, "facts");
        for (const auto & [k, v] : f.items()) {
            if (v.is_object()) {
                std::string inner;
                for (const auto & [k2, v2] : v.items())
                    if (!v2.is_structured()) inner += (inner.empty() ? "" : " ") + k2 + " " + json_text(v2);
                facts += (facts.empty() ? "" : ", ") + k + " {" + inner + "}";
            } else if (!v.is_null()) {
                facts += (facts.empty() ? "" : ", ") + k + " " + json_text(v);
            }
        }
        if (!facts.empty()) std::cout << "  holds: " << facts << "\n";
    }
}

void print_phases(const json & r) {
    std::cout << "PHASES (host wall clock; CUDA-event time separate; nested phases are not summed)\n";
    std::printf("  %-36s %-12s %-12s %-14s %-14s\n", "PHASE", "HOST WALL", "CUDA EVENT", "PEAK RSS", "PEAK GPU ABS");
    for (const auto & p : r.value("phases", json::array())) {
        // Two spaces per nesting level (a depth that is not a small non-negative integer indents nothing).
        const json & depth = field(p, "depth");
        const std::size_t indent = depth.is_number_unsigned() && depth.get<std::uint64_t>() <= 32 ? depth.get<std::size_t>() : 0;
        std::string name = std::string(2 * indent, ' ') + json_text(field(p, "name"));
        const json & cuda_ms = field(p, "cuda_event_ms");
        std::string cuda = cuda_ms.is_number() ? json_text(cuda_ms) + " ms" : "null";
        std::printf("  %-36s %-12s %-12s %-14s %-14s\n", name.c_str(), secs(field(p, "host_wall_s")).c_str(), cuda.c_str(),
                    gib(at_path(p, "memory.rss.peak_bytes")).c_str(), gib(at_path(p, "memory.gpu_absolute.peak_bytes")).c_str());
    }
}

void print_steps(const json & r) {
    const json & steps = array_field(r, "steps");
    if (!steps.empty()) {
        // One row per step (host wall clock; a long run shows its first ten and last five).
        std::cout << "\nSTEPS (host wall clock)\n";
        std::printf("  %-28s %-6s %-12s\n", "PHASE", "STEP", "HOST WALL");
        const std::size_t n = steps.size();
        for (std::size_t i = 0; i < n; ++i) {
            if (n > 15 && i == 10) std::printf("  ... %zu more ...\n", n - 15);
            if (n > 15 && i >= 10 && i < n - 5) continue;
            const auto & st = steps[i];
            std::printf("  %-28s %-6s %-12s\n", json_text(field(st, "phase")).c_str(), json_text(field(st, "index")).c_str(),
                        secs(field(st, "host_wall_s")).c_str());
        }
    }
}

void print_memory(const json & r) {
    std::cout << "\nMEMORY (whole run)\n";
    std::printf("  %-16s %-14s %-10s %-9s %s\n", "MONITOR", "PEAK", "SAMPLES", "COMPLETE", "SCOPE / REASON");
    for (const char * m : kMonitors) {
        const json & mon = at_path(r, std::string("memory.") + m);
        if (!mon.is_object()) {  // an older or partial report: say so instead of failing
            std::printf("  %-16s %-14s %-10s %-9s %s\n", m, "null", "-", "-", "absent from the report");
            continue;
        }
        std::string why = !field(mon, "reason").is_null() ? json_text(field(mon, "reason")) : json_text(field(mon, "scope"));
        std::printf("  %-16s %-14s %-10s %-9s %s\n", m, gib(field(mon, "peak_bytes")).c_str(),
                    json_text(field(mon, "samples")).c_str(), json_text(field(mon, "complete")).c_str(), why.c_str());
    }
}

void print_routes(const json & r) {
    std::cout << "\nROUTES (intended vs executed)\n";
    const json routes = r.value("routes", json::object());
    for (const auto & [c, e] : routes.items()) {
        // Why the executed route is not the intended one: the plugin's note (e.g. the image fits one VAE tile).
        std::string why;
        if (field(e, "executed").is_null())
            why = json_text(field(e, "executed_reason"));
        else if (field(e, "matches") == json(false))
            why = field(e, "executed_note").is_null() ? "(the plugin recorded no reason)" : json_text(field(e, "executed_note"));
        const std::string executed = field(e, "used") == json(false) ? "not used" : json_text(field(e, "executed"));
        std::printf("  %-16s intended %-12s executed %-12s %s\n", c.c_str(), json_text(field(e, "intended")).c_str(),
                    executed.c_str(), why.c_str());
    }
}

// The streaming summary and the scalar counters.
void print_counters(const json & r) {
    const json counters = r.value("counters", json::object());
    streaming(counters);
    // Scalars only: nested objects (the engine's plan and counters, placement) would not fit one screen.
    std::cout << "\nCOUNTERS (scalars; nested objects are in the report)\n";
    for (const auto & [c, e] : counters.items())
        for (const auto & [k, v] : e.items()) {
            const std::string shown = v.is_structured() ? "(see counters." + c + "." + k + ")" : json_text(v);
            std::printf("  %-16s %-32s %s\n", c.c_str(), k.c_str(), shown.c_str());
        }
}

}  // namespace

void summarize_report(const json & r) {
    print_identity(r);
    print_what_ran(r);
    std::cout << "\n";
    print_phases(r);
    print_steps(r);
    print_memory(r);
    print_routes(r);
    print_counters(r);
}

namespace {

// Fields that must be equal for two runs to be a matched comparison (seed 003).
// settings.values["lora.apply"].value (the key holds a dot, so not at_path).
json lora_apply(const json & r) { return field(field(at_path(r, "settings.values"), "lora.apply"), "value"); }

std::vector<std::string> identity_differences(const json & a, const json & b) {
    std::vector<std::string> diffs;
    auto cmp = [&](const std::string & path) {
        if (at_path(a, path) != at_path(b, path)) diffs.push_back(path);
    };
    const json wa = a.value("workload", json::object()), wb = b.value("workload", json::object());
    for (const auto & [k, _] : wa.items()) cmp("workload." + k);
    for (const auto & [k, _] : wb.items())
        if (!wa.contains(k)) cmp("workload." + k);
    // The checkpoint by what it holds (config and header hashes), not where it lies; inputs by their content.
    const json ia = at_path(a, "identity.checkpoint.inputs"), ib = at_path(b, "identity.checkpoint.inputs");
    const json roles = ia.is_object() ? ia : json::object();  // named: items() must not iterate a temporary
    for (const auto & [role, _] : roles.items())
        if (at_path(ia, role + ".sha256") != at_path(ib, role + ".sha256")) diffs.push_back("identity.checkpoint.inputs." + role + ".sha256");
    // LoRAs by content and strength (issue 27), and how they were applied.
    auto loras = [](const json & r) {
        json out = json::array();
        for (const auto & l : array_field(at_path(r, "identity.checkpoint"), "loras"))
            out.push_back({at_path(l, "identity.sha256"), field(l, "strength"), field(l, "bare_keys_component")});
        return out;
    };
    if (loras(a) != loras(b)) diffs.push_back("identity.checkpoint.loras");
    if (!loras(a).empty() && lora_apply(a) != lora_apply(b)) diffs.push_back("settings.values.lora.apply");
    for (const char * p : {"identity.plugin.name", "identity.plugin.version", "identity.plugin.sha256", "identity.checkpoint.identity",
                           "identity.host.git_revision", "identity.host.build_type", "environment.os", "environment.kernel",
                           "environment.gpu_name", "environment.driver_version", "environment.cuda_driver_version",
                           "environment.torch_version", "environment.ram_total_bytes", "dry_run"})
        cmp(p);
    return diffs;
}

// The matched-comparison verdict: the workload / identity fields that differ, each side's value (LoRA files a line each).
void print_identity_verdict(const json & a, const json & b) {
    const auto diffs = identity_differences(a, b);
    if (diffs.empty()) {
        std::cout << "matched comparison: workload and identity fields are equal\n";
        return;
    }
    std::cout << "NOT a matched comparison: these workload/identity fields differ:\n";
    for (const auto & d : diffs) {
        if (d == "identity.checkpoint.loras") {  // each side's files, a line each
            const auto la = lora_files_text(a), lb = lora_files_text(b);
            std::cout << "  " << d << ":\n";
            for (const auto & l : la) std::cout << "    A " << l << "\n";
            if (la.empty()) std::cout << "    A none\n";
            for (const auto & l : lb) std::cout << "    B " << l << "\n";
            if (lb.empty()) std::cout << "    B none\n";
        } else if (d == "settings.values.lora.apply") {
            std::cout << "  " << d << ": " << json_text(lora_apply(a)) << "  vs  " << json_text(lora_apply(b)) << "\n";
        } else {
            std::cout << "  " << d << ": " << json_text(at_path(a, d)) << "  vs  " << json_text(at_path(b, d)) << "\n";
        }
    }
}

// One row of the side-by-side table. Numbers get their delta and ratio (B over A: < 1 is B faster or smaller); text
// only its two sides.
void diff_row(const std::string & k, const std::string & x, const std::string & y, const json & vx = nullptr,
              const json & vy = nullptr, double scale = 1, const char * unit = "") {
    std::string delta = "-", ratio = "-";
    if (vx.is_number() && vy.is_number()) {
        const double dx = vx.get<double>(), dy = vy.get<double>();
        char buf[64];
        std::snprintf(buf, sizeof buf, "%+.3f%s", (dy - dx) / scale, unit);
        delta = buf;
        if (dx != 0) {
            std::snprintf(buf, sizeof buf, "%.3f", dy / dx);
            ratio = buf;
        }
    }
    std::printf("%-40s %-20s %-20s %-12s %s\n", k.c_str(), x.c_str(), y.c_str(), delta.c_str(), ratio.c_str());
}

// The union of the keys of `key` (an object) in both reports, sorted.
std::set<std::string> keys_of_both(const json & a, const json & b, const char * key) {
    std::set<std::string> keys;
    for (const json * r : {&a, &b}) {
        const json o = r->value(key, json::object());  // named: a temporary's items() would dangle in the loop
        for (const auto & [k, _] : o.items()) keys.insert(k);
    }
    return keys;
}

// Each phase's host wall time (and CUDA-event time where either side has one), by name.
void print_phase_rows(const json & a, const json & b) {
    auto phase_map = [](const json & r) {
        std::map<std::string, json> m;
        for (const auto & p : array_field(r, "phases")) m[json_text(field(p, "name"))] = p;
        return m;
    };
    auto pa = phase_map(a), pb = phase_map(b);
    std::set<std::string> names;
    for (auto & [k, _] : pa) names.insert(k);
    for (auto & [k, _] : pb) names.insert(k);
    static const json absent;
    for (const auto & n : names) {
        const json & wa = pa.count(n) ? field(pa[n], "host_wall_s") : absent;
        const json & wb = pb.count(n) ? field(pb[n], "host_wall_s") : absent;
        diff_row("phase " + n + " host wall", pa.count(n) ? secs(wa) : "absent", pb.count(n) ? secs(wb) : "absent", wa, wb, 1, " s");
        const json & ca = pa.count(n) ? field(pa[n], "cuda_event_ms") : absent;
        const json & cb = pb.count(n) ? field(pb[n], "cuda_event_ms") : absent;
        if (!ca.is_null() || !cb.is_null())
            diff_row("phase " + n + " cuda event ms", pa.count(n) ? json_text(ca) : "absent", pb.count(n) ? json_text(cb) : "absent", ca, cb, 1, " ms");
    }
}

// Whole-run memory peaks, bytes streamed per component, output hashes and each component's executed route.
void print_resource_rows(const json & a, const json & b) {
    for (const char * m : kMonitors) {
        const json & x = at_path(a, std::string("memory.") + m + ".peak_bytes");
        const json & y = at_path(b, std::string("memory.") + m + ".peak_bytes");
        diff_row(std::string("peak ") + m, gib(x), gib(y), x, y, 1073741824.0, " GiB");
    }
    for (const auto & c : keys_of_both(a, b, "counters")) {
        const json & x = at_path(a, "counters." + c + ".bytes_streamed");
        const json & y = at_path(b, "counters." + c + ".bytes_streamed");
        if (!x.is_null() || !y.is_null()) diff_row("bytes streamed " + c, json_text(x), json_text(y), x, y, 1048576.0, " MiB");
    }
    const json & oa = array_field(a, "outputs"), & ob = array_field(b, "outputs");
    for (std::size_t i = 0; i < std::max(oa.size(), ob.size()); ++i) {
        const std::string ha = i < oa.size() ? json_text(field(oa[i], "sha256")) : "absent",
                          hb = i < ob.size() ? json_text(field(ob[i], "sha256")) : "absent";
        diff_row("output " + std::to_string(i) + " sha256", ha.substr(0, 16), hb.substr(0, 16));
        std::printf("%-40s %s\n", "", ha == hb ? "identical files" : "different files (PNG text chunks name the run: compare pixels for images)");
    }
    for (const auto & c : keys_of_both(a, b, "routes"))
        diff_row("route " + c + " executed", json_text(at_path(a, "routes." + c + ".executed")),
                 json_text(at_path(b, "routes." + c + ".executed")));
}

}  // namespace

void diff_reports(const json & a, const json & b, const std::string & na, const std::string & nb) {
    print_identity_verdict(a, b);
    std::cout << "\n";
    std::printf("%-40s %-20s %-20s %-12s %s\n", "", na.substr(0, 20).c_str(), nb.substr(0, 20).c_str(), "B - A", "B / A");
    diff_row("status", json_text(field(a, "status")), json_text(field(b, "status")));
    diff_row("preset (effective)", json_text(at_path(a, "identity.preset.effective")), json_text(at_path(b, "identity.preset.effective")));
    diff_row("tracked total (host)", secs(at_path(a, "timing.tracked_total_host_s")), secs(at_path(b, "timing.tracked_total_host_s")),
             at_path(a, "timing.tracked_total_host_s"), at_path(b, "timing.tracked_total_host_s"), 1, " s");
    print_phase_rows(a, b);
    print_resource_rows(a, b);
}

}  // namespace ddo::host
