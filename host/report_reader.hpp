// Run reports read back (docs/metrics.md): `ddo-host report summarize | diff` (host/cmd_report.cpp). A report is
// untrusted input: any JSON text may arrive here, and a field of the wrong type or missing prints "null" (or is
// skipped) instead of failing. Linked into ddo-host and into the fuzz target tests/fuzz/report_reader_fuzz.cpp.
#pragma once

#include <string>
#include <vector>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ddo::host {

// A run report from its JSON text; `name` (the file) names it in errors. Throws UsageError for text that is not
// JSON, and for JSON that is not a run report (no integer schema_version, status string and phases list).
nlohmann::json parse_report(std::string_view text, const std::string & name);
// The report file at `path` through parse_report; throws UsageError when it cannot be opened.
nlohmann::json load_report(const std::string & path);

// A report field as people read it: a string as it is, null as "null", anything else as its JSON text.
std::string json_text(const nlohmann::json & v);
// A byte count through human_bytes ("1.500 GiB"); "null" when the field is not a number.
std::string json_bytes(const nlohmann::json & v);

// One component's quantization (counters.<c>.quantization, docs/metrics.md) in a line: "gguf: Q8_0 28, F32 8;
// stored 0.863 GiB of 3.250 GiB dense" and, with `decode`, "; decoded at each acquire, 2.100 s over 84 decodes";
// empty for a dense component or a field of the wrong type.
std::string quantization_text(const nlohmann::json & component_counters, bool decode = true);

// One component's LoRA factors (counters.<c>.lora): "LoRA 16 modules, runtime (16 at run time), factors 18.2 KiB";
// `after_run` false (the plan, before any step): "LoRA 16 modules, factors 18.2 KiB" only. Empty without.
std::string lora_text(const nlohmann::json & component_counters, bool after_run = true);
// Each LoRA of the run (identity.checkpoint.loras) in a line: "style.safetensors (kohya, rank 32, alpha / rank) at 0.7:
// 240 modules, transformer 240 matched, 0 unmatched, sha256 1a2b3c4d5e6f".
std::vector<std::string> lora_files_text(const nlohmann::json & report);

// Phases, peaks, routes and counters of one report, on stdout.
void summarize_report(const nlohmann::json & report);
// Two reports side by side on stdout; says whether they are a matched comparison (na, nb: their names).
void diff_reports(const nlohmann::json & a, const nlohmann::json & b, const std::string & na, const std::string & nb);

}  // namespace ddo::host
