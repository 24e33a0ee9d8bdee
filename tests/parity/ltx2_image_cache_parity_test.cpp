// ltx2_image with a step cache (issue 41, Note [Step caching]) against diffusers 0.42.1's own hooks
// (tools/reference/ltx2_image_cache_fixtures.py: the composed LTX-2 image reference with 4 blocks, hooked through the
// original implementation's LTX2ImageTransformerBlock registered in diffusers' TransformerBlockRegistry as the
// single-stream block it is; FirstBlockCache at two thresholds and with PAG, MagCache calibrating and at two
// thresholds; TaylorSeerCache in six configurations, hooked by module name on the same class; SeaCache at two
// thresholds and with residual order 0, its generic leader/tail path on the same block, its root hook on the
// transformer, the step's sigma in the cache context and the latents (C, 1, H, W) per sample as the indicator's input;
// 20 steps, CFG 3, rescale 0.7). The guidance batch [neg; pos] (+ pos with PAG) is ONE forward under one cache context ("cond_uncond",
// as LTX2Pipeline names it), so there is one branch whose signal covers the whole batch. TaylorSeer: per hooked
// module, the computed/predicted schedule identical; diffusers' default patterns hook nothing here, which ddo refuses.
// Per run: the latents within 1e-4 of the reference's (ltx2_image's parity tolerance, fp32), the per-step
// computed/reused pattern identical (the fixture keeps every threshold 1e-3 relative away from the values compared
// with it), the signals within 1e-5 relative. Every engine route gives latents bitwise equal to the resident weights'
// with the cache on, and the blocks the cache skips are neither acquired nor streamed.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cpu_plan.hpp"
#include "ddo/model/component_weights.hpp"
#include "ddo/model/step_cache.hpp"
#include "ddo/model/tensor_file.hpp"
#include "image_connectors.hpp"
#include "image_pipeline.hpp"
#include "image_transformer.hpp"
#include "parity/parity_support.hpp"
#include "video_denoise.hpp"
#include "weights.hpp"

namespace fs = std::filesystem;
namespace lt = ddo::ltx2;
using ddo::model::StepCache;
using ddo::model::StepCacheKind;
using ddo::model::StepCacheSettings;
using ddo::model::TensorFile;
using ddo::test::expect_close;

namespace {

const fs::path kDir = LTX2_IMAGE_CACHE_FIXTURE_DIR;
const char * kBranch = "cond_uncond";

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, "ltx2_image_cache_fixtures"); }

class Ltx2ImageCacheParity : public ::testing::Test {
protected:
    void SetUp() override { ddo::test::announce_reference(reference()); }
};

// The fixture's run parameters (diffusers' names) as cache.* settings.
StepCacheSettings settings_of(const nlohmann::json & run) {
    StepCacheSettings s;
    const auto kind = run.at("kind").get<std::string>();
    const auto & p = run.at("params");
    s.min_steps = 1;
    if (kind == "taylorseer_cache") {
        s.kind = StepCacheKind::taylorseer;
        s.cache_interval = p.value("cache_interval", 5);
        s.disable_cache_before_step = p.value("disable_cache_before_step", 3);
        if (p.contains("disable_cache_after_step")) s.disable_cache_after_step = p.at("disable_cache_after_step").get<int>();
        s.max_order = p.value("max_order", 1);
        const auto dt = p.value("taylor_factors_dtype", std::string("bfloat16"));
        s.taylor_factors_dtype = dt == "float32" ? "fp32" : dt == "float16" ? "fp16" : "bf16";
        if (p.contains("cache_identifiers")) s.cache_identifiers = p.at("cache_identifiers").get<std::vector<std::string>>();
        if (p.contains("skip_predict_identifiers"))
            s.skip_predict_identifiers = p.at("skip_predict_identifiers").get<std::vector<std::string>>();
        s.use_lite_mode = p.value("use_lite_mode", false);
    } else if (kind == "sea_cache") {
        s.kind = StepCacheKind::sea;
        s.threshold = p.at("threshold").get<double>();
        s.residual_order = p.value("residual_order", 1);
        s.retention_steps = p.value("retention_steps", 1);
        s.cache_end_steps = p.value("cache_end_steps", 1);
        s.max_consecutive_cached = p.value("max_consecutive_cached", 2);
        s.power_exp = p.value("power_exp", 3.0);
    } else if (kind == "first_block_cache") {
        s.kind = StepCacheKind::first_block;
        s.threshold = p.at("threshold").get<double>();
    } else {
        s.kind = StepCacheKind::mag;
        s.calibrate = p.value("calibrate", false);
        s.threshold = p.value("threshold", 0.06);
        s.max_skip_steps = p.value("max_skip_steps", 3);
        s.retention_ratio = p.value("retention_ratio", 0.2);
        if (p.contains("mag_ratios")) s.mag_ratios = p.at("mag_ratios").get<std::vector<double>>();
    }
    return s;
}

std::map<std::string, std::string> pattern_of(const nlohmann::json & records, int steps) {
    std::map<std::string, std::string> out;
    for (const auto & r : records) {
        auto & s = out[r.at("branch").get<std::string>()];
        if (s.empty()) s.assign(size_t(steps), '?');
        s.at(size_t(r.at("step").get<int>())) = r.at("computed").get<bool>() ? 'C' : 'R';
    }
    return out;
}

// TaylorSeer: module -> "C"/"P" per call, from the cache's pass records (summary.hooked_modules order).
std::map<std::string, std::string> module_pattern_of(const nlohmann::json & records,
                                                     const std::vector<std::string> & order) {
    std::map<std::string, std::string> out;
    for (const auto & r : records) {
        if (!r.contains("modules")) continue;
        const auto modules = r.at("modules").get<std::string>();
        for (size_t k = 0; k < modules.size() && k < order.size(); ++k)
            if (modules[k] != '-') out[order[k]] += modules[k];
    }
    return out;
}

// A StepCache for `run` bound to the tiny image DiT's modules (taylorseer needs it; other kinds ignore it).
std::unique_ptr<StepCache> cache_for(const nlohmann::json & run, int steps, const lt::TransformerConfig & c) {
    auto cache = std::make_unique<StepCache>(settings_of(run), steps);
    cache->bind_modules(lt::image_hookable_module_names(c), lt::image_diffusers_module_names(c));
    return cache;
}

struct Tiny {
    lt::ImageModel m = lt::ImageModel::open(kDir / "checkpoint");
    lt::ResidentWeights resident{m.transformer, at::kFloat, at::kCPU};
};

// The pipeline of the run's settings ("settings": CFG, rescale, PAG) from the fixture's embeddings and seed.
at::Tensor denoise(Tiny & t, const nlohmann::json & settings, StepCache * cache, lt::Weights * dit = nullptr) {
    lt::ImageGuidance g;
    g.cfg = settings.at("guidance_scale").get<double>();
    g.rescale = settings.at("guidance_rescale").get<double>();
    g.pag = settings.at("pag_scale").get<double>();
    g.pag_blocks = settings.at("pag_blocks").get<std::vector<int64_t>>();
    lt::ResidentWeights conn(t.m.connectors, at::kFloat, at::kCPU);
    const auto pe = TensorFile::open_file(kDir / "prompt_embeds.safetensors");
    const auto [embeds, mask] = lt::image_text_batch(g, pe.read("prompt_embeds"), pe.read("prompt_attention_mask"),
                                                     pe.read("negative_prompt_embeds"),
                                                     pe.read("negative_prompt_attention_mask"));
    const auto text = lt::image_connectors_forward(t.m.connectors_config, conn, embeds, mask);
    const auto geo = lt::image_geometry(t.m.vae_config, reference().at("height").get<int64_t>(),
                                        reference().at("width").get<int64_t>());
    const auto noise = lt::draw_image_noise(t.m.transformer_config.in_channels, geo, 1,
                                            uint64_t(reference().at("seed").get<int>()), at::kCPU);
    const auto schedule = lt::ltx2_schedule(t.m.scheduler_config, t.m.scheduler_json,
                                            ddo::model::default_sigmas(settings.at("steps").get<int>()), geo.tokens());
    lt::ImageDenoiseSettings ds;
    ds.guidance = g;
    ds.step_cache = cache;
    return lt::image_denoise(t.m.transformer_config, dit ? *dit : t.resident, text, geo, noise, schedule, ds);
}

}  // namespace

TEST_F(Ltx2ImageCacheParity, EveryCacheRunEqualsDiffusersHookWithTheSamePattern) {
    Tiny t;
    const auto want = TensorFile::open_file(kDir / "pipeline.safetensors");
    const int steps = reference().at("steps").get<int>();
    ASSERT_GE(steps, 20);
    ASSERT_EQ(reference().at("cache_context").get<std::string>(), kBranch);
    std::map<std::string, at::Tensor> off;
    for (const std::string name : {"off", "off_pag"}) {
        off[name] = denoise(t, reference().at("runs").at(name).at("settings"), nullptr);
        expect_close(name + " latents", off[name], want.read(name + ".latents"), 1e-4);
    }
    int runs = 0;
    for (const auto & [name, run] : reference().at("runs").items()) {
        if (!run.contains("pattern") || run.at("kind") == "taylorseer_cache") continue;
        ++runs;
        const auto & settings = run.at("settings");
        ASSERT_GT(settings.at("guidance_scale").get<double>(), 1.0) << name << ": the runs guide with CFG";
        StepCache cache(settings_of(run), steps);
        const auto got = denoise(t, settings, &cache);
        expect_close(name + " latents", got, want.read(name + ".latents"), 1e-4);
        const auto records = cache.take_step_records();
        const auto pattern = pattern_of(records, steps);
        ASSERT_EQ(pattern.size(), 1u) << name << ": one branch (the guidance batch is one forward)";
        EXPECT_EQ(pattern.at(kBranch), run.at("pattern_string").at(kBranch).get<std::string>()) << name;
        std::cout << "[ pattern   ] " << name << " " << kBranch << " " << pattern.at(kBranch) << "\n";
        if (run.contains("signals")) {
            const auto & sigs = run.at("signals");
            const std::string sig = sigs.contains("relative_l1")                   ? "relative_l1"
                                    : sigs.contains("accumulated_distance_compared") ? "accumulated_distance_compared"
                                                                                     : "accumulated_err_compared";
            for (const auto & r : records) {
                const auto & ref = run.at("signals").at(sig).at(kBranch).at(r.at("step").get<size_t>());
                if (ref.is_null() || !r.contains("signal") || r.at("signal").is_null()) {
                    EXPECT_EQ(ref.is_null(), !r.contains("signal") || r.at("signal").is_null()) << name << " " << r.dump();
                    continue;
                }
                EXPECT_NEAR(r.at("signal").get<double>(), ref.get<double>(), 1e-5 * std::abs(ref.get<double>()) + 1e-7)
                    << name << " " << r.dump();
            }
        }
        const auto & base = off.at(settings.at("pag_scale").get<double>() > 0 ? "off_pag" : "off");
        if (name == "mag_calibrate") {
            EXPECT_TRUE(at::equal(got, base)) << "a calibration run computes every step: equal to no cache bitwise";
            for (const auto & [branch, ratios] : cache.calibration()) {
                const auto ref = run.at("calibration").at(branch).get<std::vector<double>>();
                ASSERT_EQ(ratios.size(), ref.size()) << branch;
                for (size_t i = 0; i < ratios.size(); ++i)
                    EXPECT_NEAR(ratios[i], ref[i], 1e-5 * std::abs(ref[i])) << branch << " " << i;
            }
        } else {
            EXPECT_FALSE(at::equal(got, base)) << name << ": the cache reused nothing";
        }
    }
    EXPECT_GE(runs, 9);
}

TEST_F(Ltx2ImageCacheParity, EveryRouteWithTheCacheEqualsResidentBitwiseAndStreamsNoSkippedBlock) {
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(LTX2_IMAGE_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);
    Tiny t;
    const int steps = reference().at("steps").get<int>();
    const int64_t layers = t.m.transformer_config.num_layers;
    const auto dir = kDir / "checkpoint" / "transformer";
    const auto groups = lt::image_transformer_groups(t.m.transformer_config);
    uint64_t resident_bytes = 0;  // the globals and block 0: the other blocks stream on the dynamic route
    for (const auto & g : groups)
        if (g.name == "globals" || g.name == "transformer_blocks.0")
            for (const auto & n : g.tensors) resident_bytes += t.m.transformer.nbytes_of(n);
    for (const std::string name : {"fbc_hi", "fbc_pag", "mag_hi", "sea_hi"}) {
        const auto & run = reference().at("runs").at(name);
        StepCache ref_cache(settings_of(run), steps);
        const auto want = denoise(t, run.at("settings"), &ref_cache);
        const auto records = ref_cache.take_step_records();
        uint64_t skipped_blocks = 0;
        for (const auto & r : records) skipped_blocks += uint64_t(layers - r.at("blocks_computed").get<int64_t>());
        ASSERT_GT(skipped_blocks, 0u) << name;
        for (const auto route : {ddo::Route::resident, ddo::Route::dynamic, ddo::Route::disk, ddo::Route::group_block,
                                 ddo::Route::group_leaf}) {
            const double gb = route == ddo::Route::dynamic ? double(resident_bytes + 1024) / 1073741824.0 : 0;
            auto cw = ddo::model::ComponentWeights::open(dir, groups, ddo::test::cpu_plan("transformer", route, linear, gb),
                                                         at::kFloat);
            lt::EngineWeights ew(*cw, groups, at::kFloat, at::kCPU);
            StepCache cache(settings_of(run), steps);
            const auto got = denoise(t, run.at("settings"), &cache, &ew);
            EXPECT_EQ(cw->finish(), 0u) << name << " " << ddo::to_string(route);
            EXPECT_TRUE(at::equal(want, got)) << name << " route " << ddo::to_string(route) << " differs from resident by "
                                              << (want - got).abs().max().item<double>();
            EXPECT_EQ(pattern_of(cache.take_step_records(), steps), pattern_of(records, steps)) << ddo::to_string(route);
            const auto c = cw->report().at("engine").at("counters");
            // Every block the cache skipped was told to the engine (group_leaf: a block is several leaf groups).
            if (route == ddo::Route::group_leaf) {
                EXPECT_GT(c.at("skipped_groups").get<uint64_t>(), skipped_blocks) << c.dump();
            } else {
                EXPECT_EQ(c.at("skipped_groups").get<uint64_t>(), skipped_blocks) << c.dump();
                // acquires + skips: per pass the globals twice and every block once
                EXPECT_EQ(c.at("hits").get<uint64_t>() + c.at("misses").get<uint64_t>() +
                              c.at("skipped_groups").get<uint64_t>(),
                          records.size() * uint64_t(layers + 2))
                    << c.dump();
            }
            if (route != ddo::Route::resident) {
                EXPECT_GT(c.at("bytes_skipped").get<uint64_t>(), 0u) << c.dump();
            } else {
                EXPECT_EQ(c.at("bytes_skipped").get<uint64_t>(), 0u) << c.dump();
            }
            std::cout << "[ routes    ] " << name << " " << ddo::to_string(route) << " == resident bitwise; skipped "
                      << c.at("skipped_groups") << " groups, " << c.at("bytes_skipped") << " bytes not streamed, "
                      << c.at("bytes_moved") << " bytes moved\n";
        }
    }
}

// The module names the plugin binds are those of the class the fixtures hook (OriginalTransformer's named_modules()),
// and those it routes are a subset of them.
TEST_F(Ltx2ImageCacheParity, TheModuleNamesAreTheReferenceClasssOwn) {
    Tiny t;
    auto mine = lt::image_diffusers_module_names(t.m.transformer_config);
    auto theirs = reference().at("module_names").get<std::vector<std::string>>();
    std::sort(mine.begin(), mine.end());
    std::sort(theirs.begin(), theirs.end());
    EXPECT_EQ(mine, theirs);
    for (const auto & h : lt::image_hookable_module_names(t.m.transformer_config)) {
        EXPECT_TRUE(std::binary_search(theirs.begin(), theirs.end(), h)) << h;
    }
}

TEST_F(Ltx2ImageCacheParity, EveryTaylorSeerRunEqualsDiffusersHookWithTheSameModuleSchedule) {
    Tiny t;
    const auto want = TensorFile::open_file(kDir / "pipeline.safetensors");
    const int steps = reference().at("steps").get<int>();
    int runs = 0;
    for (const auto & [name, run] : reference().at("runs").items()) {
        if (run.at("kind") != "taylorseer_cache") continue;
        if (run.value("hooks_nothing", false)) {
            // diffusers' default patterns match no module of this model (the hook then changes nothing): refused.
            const auto msg = ddo::test::message_of<ddo::UsageError>([&] { cache_for(run, steps, t.m.transformer_config); });
            EXPECT_NE(msg.find("hooks no module of this model"), std::string::npos) << msg;
            EXPECT_TRUE(run.at("hooked_modules").empty()) << name;
            continue;
        }
        ++runs;
        const auto & settings = run.at("settings");
        auto cache = cache_for(run, steps, t.m.transformer_config);
        const auto got = denoise(t, settings, cache.get());
        // The expansion's arithmetic is the hook's, op for op (fp32; 1e-4 as the other runs).
        expect_close(name + " latents", got, want.read(name + ".latents"), 1e-4);
        const auto summary = cache->summary();
        const auto order = summary.at("hooked_modules").get<std::vector<std::string>>();
        auto hooked = order;
        auto ref_hooked = run.at("hooked_modules").get<std::vector<std::string>>();
        std::sort(hooked.begin(), hooked.end());
        std::sort(ref_hooked.begin(), ref_hooked.end());
        EXPECT_EQ(hooked, ref_hooked) << name;
        const auto pattern = module_pattern_of(cache->take_step_records(), order);
        const auto & ref = run.at("module_pattern").at(kBranch);
        EXPECT_EQ(pattern.size(), ref.size()) << name;
        for (const auto & [module, p] : ref.items()) {
            const auto it = pattern.find(module);
            const std::string got_p = it == pattern.end() ? "(never called)" : it->second;
            EXPECT_EQ(got_p, p.get<std::string>()) << name << " " << module;
            std::cout << "[ modules   ] " << name << " " << module << " " << got_p << "\n";
        }
        EXPECT_GT(summary.at("module_calls_predicted").get<uint64_t>(), 0u) << name;
        const auto base = want.read(settings.at("pag_scale").get<double>() > 0 ? "off_pag.latents" : "off.latents");
        EXPECT_FALSE(at::equal(got, base)) << name << ": nothing was predicted";
    }
    EXPECT_GE(runs, 5);
}

// Lite mode skips every block on a predicted step: on every route the latents equal the resident weights' bitwise,
// and the skipped blocks are neither acquired nor streamed.
TEST_F(Ltx2ImageCacheParity, TaylorSeerLiteSkipsTheStreamingOfEveryBlockOnAPredictedStep) {
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(LTX2_IMAGE_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);
    Tiny t;
    const int steps = reference().at("steps").get<int>();
    const int64_t layers = t.m.transformer_config.num_layers;
    const auto dir = kDir / "checkpoint" / "transformer";
    const auto groups = lt::image_transformer_groups(t.m.transformer_config);
    uint64_t resident_bytes = 0;
    for (const auto & g : groups)
        if (g.name == "globals" || g.name == "transformer_blocks.0")
            for (const auto & n : g.tensors) resident_bytes += t.m.transformer.nbytes_of(n);
    const auto & run = reference().at("runs").at("ts_lite");
    auto ref_cache = cache_for(run, steps, t.m.transformer_config);
    const auto want = denoise(t, run.at("settings"), ref_cache.get());
    uint64_t skipped_blocks = 0;
    for (const auto & r : ref_cache->take_step_records())
        skipped_blocks += uint64_t(layers - r.at("blocks_computed").get<int64_t>());
    // 13 of 20 steps predicted (disable_cache_before_step 3, cache_interval 5), one context, every block.
    EXPECT_EQ(skipped_blocks, uint64_t(13 * layers));
    for (const auto route : {ddo::Route::dynamic, ddo::Route::disk, ddo::Route::group_block}) {
        const double gb = route == ddo::Route::dynamic ? double(resident_bytes + 1024) / 1073741824.0 : 0;
        auto cw = ddo::model::ComponentWeights::open(dir, groups, ddo::test::cpu_plan("transformer", route, linear, gb),
                                                     at::kFloat);
        lt::EngineWeights ew(*cw, groups, at::kFloat, at::kCPU);
        auto cache = cache_for(run, steps, t.m.transformer_config);
        const auto got = denoise(t, run.at("settings"), cache.get(), &ew);
        EXPECT_EQ(cw->finish(), 0u) << ddo::to_string(route);
        EXPECT_TRUE(at::equal(want, got)) << "ts_lite route " << ddo::to_string(route) << " differs from resident";
        const auto c = cw->report().at("engine").at("counters");
        EXPECT_EQ(c.at("skipped_groups").get<uint64_t>(), skipped_blocks) << c.dump();
        EXPECT_GT(c.at("bytes_skipped").get<uint64_t>(), 0u) << c.dump();
        std::cout << "[ routes    ] ts_lite " << ddo::to_string(route) << " == resident bitwise; skipped "
                  << c.at("skipped_groups") << " groups, " << c.at("bytes_skipped") << " bytes not streamed\n";
    }
}
