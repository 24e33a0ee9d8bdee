// The pipeline options of one fixture run, as tools/reference/qwen_image_21_fixtures.py and
// qwen_image_21_quant_fixtures.py record them ("pipeline_runs" / "cases"): shared by the qwen_image_21 parity tests.
#pragma once

#include <nlohmann/json.hpp>

#include "pipeline.hpp"

namespace ddo::test {

inline ddo::qwen_image_21::PipelineOptions qwen_image_21_run_options(const nlohmann::json & run) {
    ddo::qwen_image_21::PipelineOptions o;
    o.width = run.at("width").get<int64_t>();
    o.height = run.at("height").get<int64_t>();
    o.steps = run.at("steps").get<int>();
    o.seed = run.at("seed").get<uint64_t>();
    o.true_cfg_scale = run.at("true_cfg_scale").get<double>();
    o.use_kv_cache = run.at("use_kv_cache").get<bool>();
    return o;
}

}  // namespace ddo::test
