#include "run_console.hpp"

#include "report_reader.hpp"

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "byte_text.hpp"

namespace ddo::host {

using nlohmann::json;

namespace {

std::string clock_text(double s) {
    if (s < 0 || s != s) return "--:--";
    const long t = long(s + 0.5);
    char buf[32];
    if (t >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    else std::snprintf(buf, sizeof buf, "%02ld:%02ld", t / 60, t % 60);
    return buf;
}

const json & at(const json & j, const char * key) {
    static const json null_json;
    return j.is_object() && j.contains(key) ? j.at(key) : null_json;
}

// One component's plan: route, resident / streamed groups and their bytes, slots.
std::string plan_line(const std::string & component, const json & counters) {
    std::string line = component + ": " + (at(counters, "route").is_string() ? at(counters, "route").get<std::string>() : "?");
    const json & plan = at(at(counters, "engine"), "plan");
    if (!plan.is_object()) return line;
    int resident = 0, streamed = 0;
    for (const auto & g : at(plan, "groups")) (at(g, "residency") == "resident" ? resident : streamed) += 1;
    const double res_b = at(plan, "resident_bytes").is_number() ? at(plan, "resident_bytes").get<double>() : 0;
    const double host_b = (at(plan, "pinned_bytes").is_number() ? at(plan, "pinned_bytes").get<double>() : 0) +
                          (at(plan, "pageable_bytes").is_number() ? at(plan, "pageable_bytes").get<double>() : 0);
    const int slots = at(plan, "slots").is_number() ? at(plan, "slots").get<int>() : 0;
    const double slot_b = at(plan, "slot_bytes").is_number() ? at(plan, "slot_bytes").get<double>() : 0;
    line += " — " + std::to_string(resident + streamed) + " groups: " + std::to_string(resident) + " resident (" +
            human_bytes(res_b) + ")";
    if (streamed > 0)
        line += ", " + std::to_string(streamed) + " streamed through " + std::to_string(slots) + " slots of " +
                human_bytes(slot_b) + (at(plan, "file_bytes").is_number() && at(plan, "file_bytes").get<double>() > 0
                                           ? " from the file"
                                           : " from host copies (" + human_bytes(host_b) + ")");
    line += "; device " + human_bytes(res_b + slot_b * slots);
    if (const auto q = quantization_text(counters, /*decode=*/false); !q.empty()) line += "; quantized " + q;
    if (const auto l = lora_text(counters, /*after_run=*/false); !l.empty()) line += "; " + l;
    return line;
}

}  // namespace

RunConsole::RunConsole(const RunTracker & tracker, bool enabled, bool terminal)
    : tracker_(tracker), enabled_(enabled), terminal_(terminal) {}

void RunConsole::end_line() {
    if (bar_open_) std::fputc('\n', stderr);
    bar_open_ = false;
}

void RunConsole::print_plan() {
    plan_printed_ = true;
    const json r = tracker_.to_json();
    const json & id = at(r, "identity");
    const json & plugin = at(id, "plugin");
    const json & preset = at(id, "preset");
    std::string device = "?";
    for (const auto & [c, counters] : at(r, "counters").items()) {
        const json & p = at(at(counters, "placement"), "allocator_backend");
        if (p.is_object()) {
            device = (at(p, "used") == "cuda" ? "CUDA device 0" : "CPU") + std::string(" (") + at(p, "reason").get<std::string>() + ")";
            break;
        }
    }
    std::fprintf(stderr, "ddo: %s %s on %s\n", plugin.is_object() ? at(plugin, "name").get<std::string>().c_str() : "?",
                 plugin.is_object() ? at(plugin, "version").get<std::string>().c_str() : "", device.c_str());
    if (preset.is_object())
        std::fprintf(stderr, "  preset: %s (requested %s; %s)\n", at(preset, "effective").get<std::string>().c_str(),
                     at(preset, "requested").get<std::string>().c_str(), at(preset, "reason").get<std::string>().c_str());
    for (const auto & [c, counters] : at(r, "counters").items())
        if (at(counters, "engine").is_object()) std::fprintf(stderr, "  %s\n", plan_line(c, counters).c_str());
    for (const auto & a : at(r, "adjustments"))
        std::fprintf(stderr, "  adjusted %s: %s -> %s (%s)\n", at(a, "key").get<std::string>().c_str(),
                     at(a, "requested").dump().c_str(), at(a, "effective").dump().c_str(),
                     at(a, "reason").get<std::string>().c_str());
}

void RunConsole::on_progress(const ProgressEvent & e) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (e.step == 0) {  // a phase began
        if (!phase_.empty() && !bar_open_ && !terminal_)
            std::fprintf(stderr, "  %s done in %.2f s\n", phase_.c_str(), std::chrono::duration<double>(now - phase_start_).count());
        if (bar_open_) {
            std::fprintf(stderr, "  (%.2f s)", std::chrono::duration<double>(now - phase_start_).count());
            end_line();
        }
        if (!plan_printed_ && e.phase != "load") print_plan();
        phase_ = e.phase;
        phase_start_ = now;
        if (terminal_) {
            std::fprintf(stderr, "\r\033[K  %-10s ...", e.phase.c_str());
            bar_open_ = true;
        }
        return;
    }
    const double rate = e.phase_seconds > 0 ? e.step / e.phase_seconds : 0;
    const double eta = rate > 0 ? (e.total - e.step) / rate : -1;
    if (terminal_) {
        const int width = 30, filled = e.total > 0 ? e.step * width / e.total : 0;
        std::string bar(std::size_t(filled), '#');
        bar.resize(std::size_t(width), '.');
        std::fprintf(stderr, "\r\033[K  %-10s [%s] %d/%d  %.2f it/s  ETA %s", e.phase.c_str(), bar.c_str(), e.step, e.total,
                     rate, clock_text(eta).c_str());
        bar_open_ = true;
    } else {
        std::fprintf(stderr, "  %s %d/%d  %.3f s  ETA %s\n", e.phase.c_str(), e.step, e.total, e.step_seconds,
                     clock_text(eta).c_str());
    }
}

void RunConsole::finish(int exit_code, const std::string & report_path) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (bar_open_) {
        std::fprintf(stderr, "  (%.2f s)", std::chrono::duration<double>(now - phase_start_).count());
        end_line();
    } else if (!phase_.empty() && !terminal_) {
        std::fprintf(stderr, "  %s done in %.2f s\n", phase_.c_str(), std::chrono::duration<double>(now - phase_start_).count());
    }
    if (!plan_printed_ && exit_code == 0) print_plan();  // a dry run ends after load: its plan is its result
    const json r = tracker_.to_json();
    const double wall = std::chrono::duration<double>(now - start_).count();
    if (exit_code == 0) {
        for (const auto & o : at(r, "outputs")) std::fprintf(stderr, "ddo: wrote %s\n", at(o, "path").get<std::string>().c_str());
    } else {
        std::fprintf(stderr, "ddo: %s (exit %d)\n", at(r, "status").is_string() ? at(r, "status").get<std::string>().c_str() : "failed",
                     exit_code);
    }
    std::string peaks;
    for (const char * m : {"rss", "uss", "gpu_absolute", "torch_allocated"}) {
        const json & p = at(at(at(r, "memory"), m), "peak_bytes");
        if (p.is_number()) peaks += (peaks.empty() ? "" : ", ") + std::string(m) + " " + human_bytes(p.get<double>());
    }
    std::fprintf(stderr, "ddo: report %s; %.2f s wall; peaks: %s\n", report_path.c_str(), wall,
                 peaks.empty() ? "none measured" : peaks.c_str());
}

}  // namespace ddo::host
