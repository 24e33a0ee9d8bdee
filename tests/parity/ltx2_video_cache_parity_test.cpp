// ltx2_video with a step cache (issue 41, Note [Step caching]) against diffusers 0.42.1's own hooks on LTX2Pipeline
// (tools/reference/ltx2_video_cache_fixtures.py: the tiny LTX-2.3 pipeline with 4 blocks, 20 steps, CFG + STG +
// modality isolation; the dual-stream block behind a thin wrapper that names its streams (video, audio) as the hooks
// read them, registered in diffusers' TransformerBlockRegistry; FirstBlockCache at two thresholds, MagCache calibrating
// and at two thresholds; TaylorSeerCache in four configurations on the plain transformer, which it hooks by module
// name; SeaCache at two thresholds and with residual order 0, its generic leader/tail path on the wrapped blocks (the
// audio the auxiliary stream), its root hook on the transformer, the step's sigma in the cache context and the video
// latents (C, F, H, W) per sample as the indicator's input). Three cache contexts as LTX2Pipeline names them: "cond_uncond" (the guidance batch, one forward),
// "uncond_stg", "uncond_modality". Per run: video and audio latents within 1e-4 of the reference's (ltx2_video's
// parity tolerance, fp32), the per-step pattern of every context identical (thresholds 1e-3 relative away from every
// compared value), the signals within 1e-5 relative; TaylorSeer: per context and hooked module, the
// computed/predicted schedule identical. Every engine route bitwise equal to the resident weights with the cache on,
// skipped blocks neither acquired nor streamed (TaylorSeer lite: every block of a predicted step).
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

#include "audio_vae_decoder.hpp"
#include "connectors.hpp"
#include "cpu_plan.hpp"
#include "ddo/model/component_weights.hpp"
#include "ddo/model/step_cache.hpp"
#include "ddo/model/tensor_file.hpp"
#include "latents.hpp"
#include "parity/parity_support.hpp"
#include "transformer.hpp"
#include "video_denoise.hpp"
#include "video_model.hpp"
#include "video_vae_decoder.hpp"
#include "weights.hpp"

namespace fs = std::filesystem;
namespace lt = ddo::ltx2;
using ddo::model::StepCache;
using ddo::model::StepCacheKind;
using ddo::model::StepCacheSettings;
using ddo::model::TensorFile;
using ddo::test::expect_close;

namespace {

const fs::path kDir = LTX2_VIDEO_CACHE_FIXTURE_DIR;

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, "ltx2_video_cache_fixtures"); }

class Ltx2VideoCacheParity : public ::testing::Test {
protected:
    void SetUp() override { ddo::test::announce_reference(reference()); }
};

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

// TaylorSeer: per branch, module -> "C"/"P" per call, from the cache's pass records (summary.hooked_modules order); a
// pass that called no hooked module (uncond_modality with only a2v / v2a hooked) has no "modules".
std::map<std::string, std::map<std::string, std::string>> module_pattern_of(const nlohmann::json & records,
                                                                            const std::vector<std::string> & order) {
    std::map<std::string, std::map<std::string, std::string>> out;
    for (const auto & r : records) {
        auto & per = out[r.at("branch").get<std::string>()];
        if (!r.contains("modules")) continue;
        const auto modules = r.at("modules").get<std::string>();
        for (size_t k = 0; k < modules.size() && k < order.size(); ++k)
            if (modules[k] != '-') per[order[k]] += modules[k];
    }
    return out;
}

// A StepCache for `run` bound to the tiny transformer's modules (taylorseer needs it; other kinds ignore it).
std::unique_ptr<StepCache> cache_for(const nlohmann::json & run, int steps, const lt::TransformerConfig & c) {
    auto cache = std::make_unique<StepCache>(settings_of(run), steps);
    cache->bind_modules(lt::hookable_module_names(c), lt::diffusers_module_names(c));
    return cache;
}

double num(const nlohmann::json & s, const char * k) { return s.at(k).get<double>(); }

struct Tiny {
    lt::VideoModel m = lt::VideoModel::open(kDir / "checkpoint");
    lt::ResidentWeights resident{m.transformer, at::kFloat, at::kCPU};
};

struct Latents {
    at::Tensor video, audio;  // de-normalised, unpacked, sample 0 (output_type="latent")
};

Latents denoise(Tiny & t, StepCache * cache, lt::Weights * dit = nullptr) {
    auto & m = t.m;
    lt::ResidentWeights conn(m.connectors, at::kFloat, at::kCPU), avae(m.audio_vae, at::kFloat, at::kCPU);
    const auto pe = TensorFile::open_file(kDir / "prompt_embeds.safetensors");
    const auto embeds = at::cat({pe.read("negative_prompt_embeds"), pe.read("prompt_embeds")});
    const auto mask = at::cat({pe.read("negative_prompt_attention_mask"), pe.read("prompt_attention_mask")});
    const auto text = lt::connectors_forward(m.connectors_config, conn, embeds, mask);
    const auto & s = reference().at("settings");
    const auto r = m.ratios();
    const auto g = lt::latent_geometry(r, s.at("num_frames").get<int64_t>(), s.at("height").get<int64_t>(),
                                       s.at("width").get<int64_t>(), num(s, "frame_rate"));
    auto noise = lt::draw_noise(r, g, 1, uint64_t(reference().at("seed").get<int>()), at::kCPU);
    const auto sigmas = ddo::model::default_sigmas(s.at("num_inference_steps").get<int>());
    const auto schedule = lt::ltx2_schedule(m.scheduler_config, m.scheduler_json, sigmas, g.video_tokens());
    lt::DenoiseSettings ds;
    ds.video = {num(s, "guidance_scale"), num(s, "stg_scale"), num(s, "modality_scale"), num(s, "guidance_rescale")};
    ds.audio = {num(s, "audio_guidance_scale"), num(s, "audio_stg_scale"), num(s, "audio_modality_scale"),
                num(s, "audio_guidance_rescale")};
    ds.stg_blocks = s.at("spatio_temporal_guidance_blocks").get<std::vector<int64_t>>();
    ds.use_cross_timestep = s.at("use_cross_timestep").get<bool>();
    ds.fps = num(s, "frame_rate");
    ds.step_cache = cache;
    auto d = lt::denoise(m.transformer_config, dit ? *dit : t.resident, text, g, noise, schedule, ds);
    const auto stats = lt::read_video_latent_stats(m.vae, m.vae_config);
    const auto z = lt::denormalize_video_latents(lt::unpack_video(d.video, g), stats.mean, stats.std,
                                                 m.vae_config.scaling_factor);
    const auto a = lt::unpack_audio_latents(lt::denormalize_audio_latents(avae, d.audio),
                                            m.audio_vae_config.latent_mel_bins());
    return {z[0], a[0]};
}

}  // namespace

TEST_F(Ltx2VideoCacheParity, EveryCacheRunEqualsDiffusersHookWithTheSamePattern) {
    Tiny t;
    const auto want = TensorFile::open_file(kDir / "pipeline.safetensors");
    const int steps = reference().at("steps").get<int>();
    ASSERT_GE(steps, 20);
    ASSERT_GT(num(reference().at("settings"), "guidance_scale"), 1.0);
    const auto off = denoise(t, nullptr);
    expect_close("off video latents", off.video, want.read("off.latents"), 1e-4);
    expect_close("off audio latents", off.audio, want.read("off.audio_latents"), 1e-4);
    const auto contexts = reference().at("cache_contexts").get<std::vector<std::string>>();
    int runs = 0;
    for (const auto & [name, run] : reference().at("runs").items()) {
        // The image-to-video runs ("image": LTX2ImageToVideoPipeline) are checked through ddo-host (e2e
        // ltx2_video_cache_test, Ltx2VideoCache.ImageToVideoEqualsTheHooks), where the still is read and encoded.
        if (!run.contains("pattern") || run.contains("image") || run.at("kind") == "taylorseer_cache") continue;
        ++runs;
        StepCache cache(settings_of(run), steps);
        const auto got = denoise(t, &cache);
        expect_close(name + " video latents", got.video, want.read(name + ".latents"), 1e-4);
        expect_close(name + " audio latents", got.audio, want.read(name + ".audio_latents"), 1e-4);
        const auto records = cache.take_step_records();
        const auto pattern = pattern_of(records, steps);
        EXPECT_EQ(pattern.size(), contexts.size()) << name;
        for (const auto & b : contexts) {
            ASSERT_TRUE(pattern.count(b)) << name << ": no pass of " << b;
            EXPECT_EQ(pattern.at(b), run.at("pattern_string").at(b).get<std::string>()) << name << " " << b;
            std::cout << "[ pattern   ] " << name << " " << b << " " << pattern.at(b) << "\n";
        }
        if (run.contains("signals")) {
            const auto & sigs = run.at("signals");
            const std::string sig = sigs.contains("relative_l1")                   ? "relative_l1"
                                    : sigs.contains("accumulated_distance_compared") ? "accumulated_distance_compared"
                                                                                     : "accumulated_err_compared";
            for (const auto & r : records) {
                const auto & ref =
                    run.at("signals").at(sig).at(r.at("branch").get<std::string>()).at(r.at("step").get<size_t>());
                if (ref.is_null() || !r.contains("signal") || r.at("signal").is_null()) {
                    EXPECT_EQ(ref.is_null(), !r.contains("signal") || r.at("signal").is_null()) << name << " " << r.dump();
                    continue;
                }
                EXPECT_NEAR(r.at("signal").get<double>(), ref.get<double>(), 1e-5 * std::abs(ref.get<double>()) + 1e-7)
                    << name << " " << r.dump();
            }
        }
        if (name == "mag_calibrate") {
            EXPECT_TRUE(at::equal(got.video, off.video) && at::equal(got.audio, off.audio))
                << "a calibration run computes every step: equal to no cache bitwise";
            for (const auto & [branch, ratios] : cache.calibration()) {
                const auto ref = run.at("calibration").at(branch).get<std::vector<double>>();
                ASSERT_EQ(ratios.size(), ref.size()) << branch;
                for (size_t i = 0; i < ratios.size(); ++i)
                    EXPECT_NEAR(ratios[i], ref[i], 1e-5 * std::abs(ref[i])) << branch << " " << i;
            }
        } else {
            EXPECT_FALSE(at::equal(got.video, off.video)) << name << ": the cache reused nothing";
        }
    }
    EXPECT_GE(runs, 8);
}

TEST_F(Ltx2VideoCacheParity, EveryRouteWithTheCacheEqualsResidentBitwiseAndStreamsNoSkippedBlock) {
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(LTX2_VIDEO_CACHE_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);
    Tiny t;
    const int steps = reference().at("steps").get<int>();
    const int64_t layers = t.m.transformer_config.num_layers;
    const auto dir = kDir / "checkpoint" / "transformer";
    const auto groups = lt::transformer_groups(t.m.transformer_config);
    uint64_t resident_bytes = 0;  // the globals and block 0: the other blocks stream on the dynamic route
    for (const auto & g : groups)
        if (g.name == "globals" || g.name == "transformer_blocks.0")
            for (const auto & n : g.tensors) resident_bytes += t.m.transformer.nbytes_of(n);
    for (const std::string name : {"fbc_hi", "mag_hi", "sea_hi"}) {
        const auto & run = reference().at("runs").at(name);
        StepCache ref_cache(settings_of(run), steps);
        const auto want = denoise(t, &ref_cache);
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
            const auto got = denoise(t, &cache, &ew);
            EXPECT_EQ(cw->finish(), 0u) << name << " " << ddo::to_string(route);
            EXPECT_TRUE(at::equal(want.video, got.video) && at::equal(want.audio, got.audio))
                << name << " route " << ddo::to_string(route) << " differs from resident";
            EXPECT_EQ(pattern_of(cache.take_step_records(), steps), pattern_of(records, steps)) << ddo::to_string(route);
            const auto c = cw->report().at("engine").at("counters");
            if (route == ddo::Route::group_leaf) {
                EXPECT_GT(c.at("skipped_groups").get<uint64_t>(), skipped_blocks) << c.dump();
            } else {
                EXPECT_EQ(c.at("skipped_groups").get<uint64_t>(), skipped_blocks) << c.dump();
            }
            if (route != ddo::Route::resident) {
                EXPECT_GT(c.at("bytes_skipped").get<uint64_t>(), 0u) << c.dump();
            } else {
                EXPECT_EQ(c.at("bytes_skipped").get<uint64_t>(), 0u) << c.dump();
            }
            std::cout << "[ routes    ] " << name << " " << ddo::to_string(route) << " == resident bitwise; skipped "
                      << c.at("skipped_groups") << " groups, " << c.at("bytes_skipped") << " bytes not streamed\n";
        }
    }
}

// The module names the plugin binds are LTX2VideoTransformer3DModel's named_modules() (what diffusers matches the
// patterns against), and those it routes are a subset of them.
TEST_F(Ltx2VideoCacheParity, TheModuleNamesAreTheDiffusersClasssOwn) {
    Tiny t;
    auto mine = lt::diffusers_module_names(t.m.transformer_config);
    auto theirs = reference().at("module_names").get<std::vector<std::string>>();
    std::sort(mine.begin(), mine.end());
    std::sort(theirs.begin(), theirs.end());
    EXPECT_EQ(mine, theirs);
    for (const auto & h : lt::hookable_module_names(t.m.transformer_config)) {
        EXPECT_TRUE(std::binary_search(theirs.begin(), theirs.end(), h)) << h;
    }
}

TEST_F(Ltx2VideoCacheParity, EveryTaylorSeerRunEqualsDiffusersHookWithTheSameModuleSchedule) {
    Tiny t;
    const auto want = TensorFile::open_file(kDir / "pipeline.safetensors");
    const int steps = reference().at("steps").get<int>();
    const auto contexts = reference().at("cache_contexts").get<std::vector<std::string>>();
    const auto off_video = want.read("off.latents"), off_audio = want.read("off.audio_latents");
    int runs = 0;
    for (const auto & [name, run] : reference().at("runs").items()) {
        // i2v_ts ("image") is checked through ddo-host (e2e ltx2_video_cache_test), where the still is encoded.
        if (run.at("kind") != "taylorseer_cache" || run.contains("image")) continue;
        ++runs;
        auto cache = cache_for(run, steps, t.m.transformer_config);
        const auto got = denoise(t, cache.get());
        // The expansion's arithmetic is the hook's, op for op (fp32; 1e-4 as the other runs).
        expect_close(name + " video latents", got.video, want.read(name + ".latents"), 1e-4);
        expect_close(name + " audio latents", got.audio, want.read(name + ".audio_latents"), 1e-4);
        const auto summary = cache->summary();
        const auto order = summary.at("hooked_modules").get<std::vector<std::string>>();
        auto hooked = order;
        auto ref_hooked = run.at("hooked_modules").get<std::vector<std::string>>();
        std::sort(hooked.begin(), hooked.end());
        std::sort(ref_hooked.begin(), ref_hooked.end());
        EXPECT_EQ(hooked, ref_hooked) << name;
        const auto pattern = module_pattern_of(cache->take_step_records(), order);
        for (const auto & b : contexts) {
            const auto & ref = run.at("module_pattern").at(b);
            const auto mine = pattern.count(b) ? pattern.at(b) : std::map<std::string, std::string>{};
            EXPECT_EQ(mine.size(), ref.size()) << name << " " << b << ": the modules called in this context";
            for (const auto & [module, p] : ref.items()) {
                const auto it = mine.find(module);
                const std::string got_p = it == mine.end() ? "(never called)" : it->second;
                EXPECT_EQ(got_p, p.get<std::string>()) << name << " " << b << " " << module;
                std::cout << "[ modules   ] " << name << " " << b << " " << module << " " << got_p << "\n";
            }
        }
        EXPECT_GT(summary.at("module_calls_predicted").get<uint64_t>(), 0u) << name;
        EXPECT_FALSE(at::equal(got.video, off_video)) << name << ": nothing was predicted";
        EXPECT_FALSE(at::equal(got.audio, off_audio)) << name << ": nothing was predicted";
    }
    EXPECT_GE(runs, 4);
}

// Lite mode skips every block on a predicted step (the blocks "skip": zeros of both streams; proj_out predicted,
// audio_proj_out computed on the zeros): on every route the latents equal the resident weights' bitwise, and the
// skipped blocks are neither acquired nor streamed.
TEST_F(Ltx2VideoCacheParity, TaylorSeerLiteSkipsTheStreamingOfEveryBlockOnAPredictedStep) {
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(LTX2_VIDEO_CACHE_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);
    Tiny t;
    const int steps = reference().at("steps").get<int>();
    const int64_t layers = t.m.transformer_config.num_layers;
    const auto dir = kDir / "checkpoint" / "transformer";
    const auto groups = lt::transformer_groups(t.m.transformer_config);
    uint64_t resident_bytes = 0;
    for (const auto & g : groups)
        if (g.name == "globals" || g.name == "transformer_blocks.0")
            for (const auto & n : g.tensors) resident_bytes += t.m.transformer.nbytes_of(n);
    const auto & run = reference().at("runs").at("ts_lite");
    auto ref_cache = cache_for(run, steps, t.m.transformer_config);
    const auto want = denoise(t, ref_cache.get());
    uint64_t skipped_blocks = 0;
    for (const auto & r : ref_cache->take_step_records())
        skipped_blocks += uint64_t(layers - r.at("blocks_computed").get<int64_t>());
    // 13 of 20 steps predicted (disable_cache_before_step 3, cache_interval 5), three contexts, every block.
    EXPECT_EQ(skipped_blocks, uint64_t(3 * 13 * layers));
    for (const auto route : {ddo::Route::dynamic, ddo::Route::disk, ddo::Route::group_block}) {
        const double gb = route == ddo::Route::dynamic ? double(resident_bytes + 1024) / 1073741824.0 : 0;
        auto cw = ddo::model::ComponentWeights::open(dir, groups, ddo::test::cpu_plan("transformer", route, linear, gb),
                                                     at::kFloat);
        lt::EngineWeights ew(*cw, groups, at::kFloat, at::kCPU);
        auto cache = cache_for(run, steps, t.m.transformer_config);
        const auto got = denoise(t, cache.get(), &ew);
        EXPECT_EQ(cw->finish(), 0u) << ddo::to_string(route);
        EXPECT_TRUE(at::equal(want.video, got.video) && at::equal(want.audio, got.audio))
            << "ts_lite route " << ddo::to_string(route) << " differs from resident";
        const auto c = cw->report().at("engine").at("counters");
        EXPECT_EQ(c.at("skipped_groups").get<uint64_t>(), skipped_blocks) << c.dump();
        EXPECT_GT(c.at("bytes_skipped").get<uint64_t>(), 0u) << c.dump();
        std::cout << "[ routes    ] ts_lite " << ddo::to_string(route) << " == resident bitwise; skipped "
                  << c.at("skipped_groups") << " groups, " << c.at("bytes_skipped") << " bytes not streamed\n";
    }
}
