// LTX-2 video VAE decoder parity against diffusers fixtures (tools/reference/ltx2_video_vae_fixtures.py):
// single latent frame -> multi-frame (2.0-like reflect / residual, 2.3-like zeros / patch 4 / conv_in, timestep-
// conditioned causal) -> spatial tiles -> temporal windows -> windows with tiles; the pipeline's de-normalisation;
// leaf_offload through the offload engine (group_leaf, one group per leaf) bitwise equal to resident; the `auto`
// choice of seed 003's table on synthetic budgets; config and checkpoint errors naming key / tensor and file; and
// the peak activation bytes of temporal_stream vs resident on a longer clip (printed).
// Tolerances (fp32, CPU): decoded video max abs 1e-4 (outputs in about [-1, 1]); de-normalisation 1e-6;
// leaf_offload vs resident: bitwise.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "cpu_plan.hpp"
#include "ddo/error.hpp"
#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_file.hpp"
#include "parity/parity_support.hpp"
#include "video_vae_choice.hpp"
#include "video_vae_config.hpp"
#include "video_vae_decoder.hpp"
#include "video_vae_tiling.hpp"
#include "weights.hpp"

namespace lt = ddo::ltx2;
namespace fs = std::filesystem;
using ddo::model::TensorFile;

namespace {

const fs::path kDir = LTX2_VIDEO_VAE_FIXTURE_DIR;
constexpr double kVideoTol = 1e-4;
constexpr double kDenormTol = 1e-6;

using ddo::test::error_of;
using ddo::test::expect_close;

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, "ltx2_video_vae_fixtures"); }

class Ltx2VideoVae : public ddo::test::ParitySuite {
protected:
    Ltx2VideoVae() : ParitySuite(kDir, "ltx2_video_vae_fixtures") {}
};

TensorFile decode_fixture() { return TensorFile::open_file(kDir / "decode.safetensors"); }

// One tiny VAE of the fixture set, read resident in fp32 on the CPU.
struct Vae {
    explicit Vae(const std::string & name)
        : config(lt::VideoVaeConfig::load(kDir / name)), file(TensorFile::open_component(kDir / name)) {
        lt::validate_video_vae_checkpoint(file, config);
    }
    lt::VideoVaeConfig config;
    TensorFile file;
    lt::ResidentWeights weights{file, at::kFloat, at::Device(at::kCPU)};
    lt::VideoVaeDecoder decoder{config, weights};
};

lt::VideoVaeStrategy strategy_of(const std::string & s) {
    if (s == "tiled") return lt::VideoVaeStrategy::tiled;
    if (s == "temporal_stream") return lt::VideoVaeStrategy::temporal_stream;
    return lt::VideoVaeStrategy::resident;
}

// Runs every fixture case of `strategy` through decode_video with the tiling the plan would give; returns how many
// cases ran. Tiled / temporal cases must really decode in more than one piece.
int run_cases(const std::string & strategy, const std::string & name_part, const std::string & exclude = "") {
    auto f = decode_fixture();
    int ran = 0;
    for (const auto & c : reference().at("cases")) {
        const auto name = c.at("name").get<std::string>();
        if (c.at("strategy").get<std::string>() != strategy || name.find(name_part) == std::string::npos ||
            (!exclude.empty() && name.find(exclude) != std::string::npos))
            continue;
        Vae vae(c.at("vae").get<std::string>());
        lt::VideoVaeTiling tiling;
        if (!c.at("tile").is_null()) {
            const ddo::model::VaeTiles tiles{c.at("tile").get<int>(), c.at("overlap").get<int>()};
            const int frames = c.at("temporal_frames").is_null() ? 16 : c.at("temporal_frames").get<int>();
            tiling = lt::VideoVaeTiling::from_plan(tiles, frames, vae.config);
        }
        const auto ts = f.contains(name + ".timestep") ? f.read(name + ".timestep") : at::Tensor();
        int pieces = 0;
        const auto video = lt::decode_video(vae.decoder, f.read(name + ".z"), ts, strategy_of(strategy), tiling,
                                            [&](int done, int total) {
                                                EXPECT_EQ(done, pieces + 1);
                                                EXPECT_GE(total, done);
                                                pieces = done;
                                            });
        if (strategy != "resident") {
            EXPECT_GT(pieces, 1) << name << " must decode in several pieces";
        }
        expect_close(name + " (" + strategy + ", " + std::to_string(pieces) + " pieces)", video,
                     f.read(name + ".video"), kVideoTol);
        ++ran;
    }
    return ran;
}

nlohmann::json config_json(const fs::path & dir) {
    std::ifstream in(dir / "config.json");
    return nlohmann::json::parse(in);
}

}  // namespace

TEST_F(Ltx2VideoVae, DecodeSingleLatentFrame) { EXPECT_EQ(run_cases("resident", "_single"), 2); }

TEST_F(Ltx2VideoVae, DecodeMultiFrame) { EXPECT_EQ(run_cases("resident", "_multi"), 3); }

TEST_F(Ltx2VideoVae, DecodeTiled) { EXPECT_EQ(run_cases("tiled", "_tiled"), 3); }

TEST_F(Ltx2VideoVae, DecodeTemporalWindows) { EXPECT_EQ(run_cases("temporal_stream", "_temporal", "_tiled"), 3); }

TEST_F(Ltx2VideoVae, DecodeTemporalWindowsWithTiles) { EXPECT_EQ(run_cases("temporal_stream", "_temporal_tiled"), 2); }

TEST_F(Ltx2VideoVae, Denormalisation) {
    auto f = decode_fixture();
    for (const std::string name : {"v20", "v23", "tcond"}) {
        Vae vae(name);
        const auto stats = lt::read_video_latent_stats(vae.file, vae.config);
        const auto got = lt::denormalize_video_latents(f.read("denorm.x"), stats.mean, stats.std,
                                                       vae.config.scaling_factor);
        expect_close("denormalize " + name + " (scaling_factor " + std::to_string(vae.config.scaling_factor) + ")",
                     got, f.read("denorm." + name + ".out"), kDenormTol);
    }
}

TEST_F(Ltx2VideoVae, SpecsAndLeafGroupsCoverTheDecoder) {
    for (const std::string name : {"v20", "v23", "tcond"}) {
        Vae vae(name);
        std::set<std::string> specs, grouped, stored;
        for (const auto & [t, shape] : lt::video_vae_decoder_specs(vae.config)) EXPECT_TRUE(specs.insert(t).second) << t;
        for (const auto & g : lt::video_vae_leaf_groups(vae.config)) {
            for (const auto & t : g.tensors) {
                EXPECT_TRUE(grouped.insert(t).second) << t << " in two groups";
                EXPECT_EQ(t.rfind(g.name + ".", 0), 0u) << t << " outside its module " << g.name;
            }
        }
        for (const auto & n : vae.file.names())
            if (n.rfind("decoder.", 0) == 0) stored.insert(n);
        EXPECT_EQ(specs, grouped) << name;
        EXPECT_EQ(specs, stored) << name << ": the decoder reads every decoder tensor of the checkpoint";
    }
}

TEST_F(Ltx2VideoVae, LeafOffloadThroughTheEngineEqualsResidentBitwise) {
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(LTX2_VIDEO_VAE_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);
    auto f = decode_fixture();
    for (const std::string name : {"v23_multi", "tcond_multi"}) {
        const std::string vname = name.substr(0, name.find('_'));
        Vae vae(vname);
        const auto z = f.read(name + ".z");
        const auto ts = f.contains(name + ".timestep") ? f.read(name + ".timestep") : at::Tensor();
        const auto want = vae.decoder.decode(z, ts);

        // What ModelRun::plan makes for vae.strategy = leaf_offload on the CPU.
        const auto plan = ddo::test::cpu_plan("vae", ddo::Route::group_leaf, linear);
        const auto groups = lt::video_vae_leaf_groups(vae.config);
        auto cw = ddo::model::ComponentWeights::open(kDir / vname, groups, plan, at::kFloat);
        at::Tensor got;
        {
            lt::EngineWeights engine(*cw, groups, at::kFloat, at::Device(at::kCPU));
            const lt::VideoVaeDecoder leafwise(vae.config, engine);
            got = leafwise.decode(z, ts);
        }
        EXPECT_EQ(cw->finish(), 0u);
        EXPECT_EQ(cw->route(), "group_leaf");
        EXPECT_GT(cw->bytes_streamed(), 0u);
        EXPECT_TRUE(at::equal(want, got)) << name << ": leaf_offload differs from resident";
        std::cout << "[ routes    ] " << name << ": leaf_offload (group_leaf, " << groups.size()
                  << " leaf groups, " << cw->bytes_streamed() << " bytes streamed) == resident bitwise\n";
    }
}

TEST_F(Ltx2VideoVae, ProgressMayInterruptTheDecode) {
    auto f = decode_fixture();
    Vae vae("v20");
    const auto tiling = lt::VideoVaeTiling::from_plan({48, 16}, 16, vae.config);
    int calls = 0;
    const auto e = error_of([&] {
        lt::decode_video(vae.decoder, f.read("v20_temporal_tiled.z"), {}, lt::VideoVaeStrategy::temporal_stream,
                         tiling, [&](int, int) {
                             ++calls;
                             throw ddo::RuntimeError("interrupted");
                         });
    });
    EXPECT_EQ(e, "runtime: interrupted");
    EXPECT_EQ(calls, 1);
}

TEST_F(Ltx2VideoVae, DecodeRejectsWrongInputs) {
    Vae v20("v20"), tcond("tcond");
    const auto z = at::zeros({1, v20.config.latent_channels, 1, 2, 2});
    for (const auto & [what, e, key] : std::vector<std::tuple<std::string, std::string, std::string>>{
             {"channels", error_of([&] { v20.decoder.decode(at::zeros({1, 3, 1, 2, 2})); }), "latent_channels"},
             {"timestep", error_of([&] { tcond.decoder.decode(z); }), "timestep_conditioning"},
             {"reflect", error_of([&] { v20.decoder.decode(z.narrow(4, 0, 1)); }), "'reflect'"}}) {
        std::cout << "[ error     ] " << what << ": " << e << "\n";
        EXPECT_EQ(e.rfind("usage: ", 0), 0u) << what << ": " << e;
        EXPECT_NE(e.find(key), std::string::npos) << e;
    }
}

TEST_F(Ltx2VideoVae, ConfigLayoutOfTheRealCheckpoints) {
    // LTX-2.0 and 2.3 vae/config.json (the converter's values, models.md §5.9) without a checkpoint.
    nlohmann::json v20 = {{"decoder_block_out_channels", {256, 512, 1024}},
                          {"decoder_layers_per_block", {5, 5, 5, 5}},
                          {"upsample_type", {"spatiotemporal", "spatiotemporal", "spatiotemporal"}},
                          {"upsample_residual", {true, true, true}},
                          {"upsample_factor", {2, 2, 2}},
                          {"decoder_causal", false},
                          {"decoder_spatial_padding_mode", "reflect"},
                          {"spatial_compression_ratio", 32},
                          {"temporal_compression_ratio", 8}};
    auto c = lt::VideoVaeConfig::from_json(v20, "v20/config.json");
    ASSERT_EQ(c.up_blocks.size(), 3u);
    EXPECT_EQ(c.mid_channels, 1024);
    EXPECT_EQ(c.up_blocks[0].out_channels, 512);
    EXPECT_EQ(c.up_blocks[2].out_channels, 128);
    EXPECT_FALSE(c.up_blocks[0].conv_in);
    EXPECT_EQ(c.spatial_upscale(), 32);
    EXPECT_EQ(c.decoded_frames(16), 121);
    nlohmann::json v23 = v20;
    v23["decoder_block_out_channels"] = {256, 512, 512, 1024};
    v23["decoder_layers_per_block"] = {4, 6, 4, 2, 2};
    v23["upsample_type"] = {"spatiotemporal", "spatiotemporal", "temporal", "spatial"};
    v23["decoder_spatio_temporal_scaling"] = {true, true, true, true};
    v23["upsample_residual"] = {false, false, false, false};
    v23["upsample_factor"] = {2, 2, 1, 2};
    v23["decoder_spatial_padding_mode"] = "zeros";
    c = lt::VideoVaeConfig::from_json(v23, "v23/config.json");
    ASSERT_EQ(c.up_blocks.size(), 4u);
    std::vector<int64_t> widths;
    for (const auto & b : c.up_blocks) {
        widths.push_back(b.out_channels);
        EXPECT_FALSE(b.conv_in);
    }
    EXPECT_EQ(widths, (std::vector<int64_t>{512, 512, 256, 128}));
    EXPECT_EQ(c.spatial_upscale(), 32);
    EXPECT_EQ(c.temporal_upscale(), 8);
    EXPECT_EQ(c.decoded_frames(16), 121);
    const auto spec = lt::video_vae_decoder_specs(c);
    EXPECT_EQ(spec.back().first, "decoder.conv_out.conv.bias");
    EXPECT_EQ(spec.back().second, (std::vector<int64_t>{48}));
}

TEST_F(Ltx2VideoVae, ConfigRejectsUnsupportedValues) {
    const fs::path file = kDir / "v23" / "config.json";
    const auto base = config_json(kDir / "v23");
    for (const auto & [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
             {"decoder_inject_noise", true},
             {"upsample_type", {"spatiotemporal", "sideways", "temporal", "spatial"}},
             {"decoder_spatial_padding_mode", "mirror"},
             {"patch_size_t", 2},
             {"upsample_factor", {2, 2}},
             {"decoder_layers_per_block", {1, 1, 1}},
             {"timestep_conditioning", true}}) {  // v23 has a conv_in resnet, which cannot be conditioned
        auto j = base;
        j[key] = value;
        const auto e = error_of([&] { lt::VideoVaeConfig::from_json(j, file); });
        EXPECT_EQ(e.rfind("usage: ", 0), 0u) << key << ": " << e;
        EXPECT_NE(e.find(file.string()), std::string::npos) << e;
        EXPECT_NE(e.find("'" + key + "'"), std::string::npos) << e;
    }
}

TEST_F(Ltx2VideoVae, CheckpointErrorsNameTensorAndFile) {
    for (const auto & b : reference().at("broken")) {
        const auto name = b.at("name").get<std::string>();
        const auto dir = kDir / "broken" / name;
        const auto cfg = lt::VideoVaeConfig::load(dir);
        const auto file = TensorFile::open_component(dir);
        const auto e = error_of([&] { lt::validate_video_vae_checkpoint(file, cfg); });
        std::cout << "[ error     ] " << name << ": " << e << "\n";
        EXPECT_EQ(e.rfind("runtime: ", 0), 0u) << e;
        EXPECT_NE(e.find(b.at("tensor").get<std::string>()), std::string::npos) << e;
        EXPECT_NE(e.find(dir.string()), std::string::npos) << e;
    }
}

TEST_F(Ltx2VideoVae, AutoFollowsTheSeedTable) {
    using S = lt::VideoVaeStrategy;
    const lt::VideoVaeTiling t;
    constexpr std::uint64_t MiB = 1 << 20, GiB = std::uint64_t(1) << 30;
    const std::uint64_t weights = 800 * MiB, clip = 12 * GiB, window = 2 * GiB;
    struct Case {
        const char * what;
        bool temporal, cuda;
        std::optional<std::uint64_t> device, host;
        S want;
    };
    for (const Case & k : {
             Case{"fits", true, true, 16 * GiB, 64 * GiB, S::resident},
             Case{"fits on the CPU", true, false, 16 * GiB, std::nullopt, S::resident},
             Case{"weights do not fit, RAM holds them", true, true, 12 * GiB + 100 * MiB, 64 * GiB, S::leaf_offload},
             Case{"weights do not fit, RAM too small", true, true, 12 * GiB + 100 * MiB, 100 * MiB, S::temporal_stream},
             Case{"no leaf_offload on the CPU", true, false, 12 * GiB + 100 * MiB, std::nullopt, S::temporal_stream},
             Case{"activations do not fit, long clip", true, true, 4 * GiB, 64 * GiB, S::temporal_stream},
             Case{"activations do not fit, one window", false, true, 4 * GiB, 64 * GiB, S::tiled},
             Case{"unknown budget, long clip", true, true, std::nullopt, 64 * GiB, S::temporal_stream},
             Case{"unknown budget, one window", false, false, std::nullopt, std::nullopt, S::tiled}}) {
        const auto d = lt::decide_video_vae_strategy(weights, clip, window, k.temporal, k.cuda, k.device, "test",
                                                     k.host, t);
        std::cout << "[ auto      ] " << k.what << ": " << lt::video_vae_strategy_name(d.strategy) << " (" << d.reason
                  << ")\n";
        EXPECT_EQ(d.strategy, k.want) << k.what << ": " << d.reason;
        EXPECT_EQ(d.reason.rfind("auto: ", 0), 0u) << d.reason;
    }
    // Through the plan: explicit settings are taken as they are; auto on a given device budget.
    Vae vae("v20");
    ddo::model::ComponentPlan plan;
    plan.component = "vae";
    plan.vae_tiles = {48, 16};
    plan.vae_strategy = ddo::VaeStrategyKind::temporal_stream;
    auto c = lt::choose_video_vae_strategy(plan, vae.file, vae.config, 1, 121, 64, 64, at::kFloat);
    EXPECT_EQ(c.strategy, S::temporal_stream);
    EXPECT_EQ(c.requested, "temporal_stream");
    EXPECT_EQ(c.tiling.tile_sample_stride_width, 32);
    plan.vae_strategy = ddo::VaeStrategyKind::automatic;
    plan.capacities.device_budget_gb = 100;
    c = lt::choose_video_vae_strategy(plan, vae.file, vae.config, 1, 121, 64, 64, at::kFloat);
    EXPECT_EQ(c.strategy, S::resident) << c.reason;
    EXPECT_GT(c.facts.at("estimate_activation_bytes").get<std::uint64_t>(),
              c.facts.at("estimate_window_activation_bytes").get<std::uint64_t>());
    plan.capacities.device_budget_gb = 1e-5;  // ~10 KiB
    c = lt::choose_video_vae_strategy(plan, vae.file, vae.config, 1, 121, 64, 64, at::kFloat);
    EXPECT_EQ(c.strategy, S::temporal_stream) << c.reason;
    c = lt::choose_video_vae_strategy(plan, vae.file, vae.config, 1, 1, 64, 64, at::kFloat);
    EXPECT_EQ(c.strategy, S::tiled) << c.reason;
    std::cout << "[ auto      ] plan: " << c.reason << "; facts " << c.facts.dump() << "\n";
    plan.vae_tiles = {40, 8};
    const auto e = error_of([&] { lt::choose_video_vae_strategy(plan, vae.file, vae.config, 1, 1, 64, 64, at::kFloat); });
    EXPECT_NE(e.find("usage: vae.tile_size"), std::string::npos) << e;
}

namespace {

// The CPU allocator's memory reports (c10 MemoryReportingInfoBase, the profiler's hook): the peak of the total
// bytes allocated while installed, above the total at installation.
struct PeakAllocated final : c10::MemoryReportingInfoBase {
    std::int64_t base = -1, peak = 0, events = 0;
    void reportMemoryUsage(void *, int64_t, size_t total_allocated, size_t, c10::Device device) override {
        if (device.type() != c10::DeviceType::CPU) return;
        ++events;
        if (base < 0) base = std::int64_t(total_allocated);
        peak = std::max(peak, std::int64_t(total_allocated) - base);
    }
    bool memoryProfilingEnabled() const override { return true; }
};

std::int64_t peak_bytes_of(const std::function<void()> & fn, std::int64_t * events) {
    auto reporter = std::make_shared<PeakAllocated>();
    {
        c10::DebugInfoGuard guard(c10::DebugInfoKind::PROFILER_STATE, reporter);
        auto probe = at::empty({1}, at::kFloat);  // the first report sets the base
        fn();
    }
    *events = reporter->events;
    return reporter->peak;
}

}  // namespace

TEST_F(Ltx2VideoVae, PeakActivationOfTemporalStreamVsResident) {
    Vae vae("v20");
    const auto z = at::randn({1, vae.config.latent_channels, 12, 2, 2}, at::TensorOptions().dtype(at::kFloat));
    const auto tiling = lt::VideoVaeTiling::from_plan({512, 64}, 16, vae.config);
    vae.decoder.decode(z.narrow(2, 0, 1));  // reads (and caches) every weight before the measurement
    std::int64_t ev_resident = 0, ev_stream = 0;
    at::Tensor a, b;
    const auto resident = peak_bytes_of(
        [&] { a = lt::decode_video(vae.decoder, z, {}, lt::VideoVaeStrategy::resident, tiling); }, &ev_resident);
    const auto stream = peak_bytes_of(
        [&] { b = lt::decode_video(vae.decoder, z, {}, lt::VideoVaeStrategy::temporal_stream, tiling); }, &ev_stream);
    ASSERT_GT(ev_resident, 0) << "the CPU allocator reported nothing";
    ASSERT_GT(ev_stream, 0);
    const auto out_bytes = std::int64_t(a.numel()) * std::int64_t(a.element_size());
    std::cout << "[ memory    ] v20, 12 latent frames -> " << a.size(2) << " frames " << a.size(3) << "x" << a.size(4)
              << " (output " << out_bytes << " bytes), peak CPU bytes allocated (c10 allocator reports): resident "
              << resident << ", temporal_stream (windows of 16 frames) " << stream << " ("
              << double(stream) / double(resident) << "x)\n";
    EXPECT_LT(stream, resident);
    EXPECT_EQ(a.sizes(), b.sizes());
}

// Issue 28 item 5: decode_video_frames hands temporal_stream's frames on window by window, bit for bit the frames
// decode_video returns, in order and each once; a sink that turns each piece into RGB24 and lets it go (as the MP4
// writer does) needs no whole-clip buffer. Measured with the c10 allocator reports on a 121-frame clip: the peak of
// the streamed decode + conversion against the whole-clip decode + conversion (today's path before streaming), and the
// whole-clip frame buffer F x H x W x 3 x (4 + 1) (float32 frames + uint8 copy).
TEST_F(Ltx2VideoVae, StreamedFramesAreTheClipsAndNeedNoClipBuffer) {
    Vae vae("v20");
    const int64_t rt = vae.config.temporal_compression_ratio;
    const auto z = at::randn({1, vae.config.latent_channels, 120 / rt + 1, 4, 4}, at::TensorOptions().dtype(at::kFloat));
    const auto tiling = lt::VideoVaeTiling::from_plan({512, 64}, 16, vae.config);
    vae.decoder.decode(z.narrow(2, 0, 1));  // reads (and caches) every weight before the measurement
    const auto rgb24 = [](const at::Tensor & v) {
        auto x = (v[0].to(at::kFloat) / 2 + 0.5).clamp(0, 1);
        return (x * 255).round().to(at::kByte).permute({1, 2, 3, 0}).contiguous();
    };
    at::Tensor whole;
    std::int64_t ev_whole = 0, ev_stream = 0;
    const auto peak_whole = peak_bytes_of(
        [&] {
            whole = lt::decode_video(vae.decoder, z, {}, lt::VideoVaeStrategy::temporal_stream, tiling);
            const auto rgb = rgb24(whole);
        },
        &ev_whole);
    std::int64_t pieces = 0, biggest = 0;
    const auto peak_stream = peak_bytes_of(
        [&] {
            lt::decode_video_frames(vae.decoder, z, {}, lt::VideoVaeStrategy::temporal_stream, tiling,
                                    [&](const at::Tensor & f) {
                                        const auto rgb = rgb24(f);
                                        ++pieces;
                                        biggest = std::max<std::int64_t>(biggest, rgb.size(0));
                                    });
        },
        &ev_stream);
    ASSERT_GT(ev_whole, 0);
    ASSERT_GT(ev_stream, 0);
    ASSERT_EQ(whole.size(2), 121);
    int64_t at_frame = 0;
    lt::decode_video_frames(vae.decoder, z, {}, lt::VideoVaeStrategy::temporal_stream, tiling, [&](const at::Tensor & f) {
        EXPECT_TRUE(at::equal(f, whole.narrow(2, at_frame, f.size(2)))) << "frames " << at_frame << "+" << f.size(2);
        at_frame += f.size(2);
    });
    EXPECT_EQ(at_frame, 121) << "every frame handed on once";
    const std::int64_t buffer = whole.size(2) * whole.size(3) * whole.size(4) * 3 * (4 + 1);
    std::cout << "[ memory    ] v20, 121 frames " << whole.size(3) << "x" << whole.size(4) << " in " << pieces
              << " pieces (at most " << biggest << " frames): peak CPU bytes allocated, whole clip + RGB24 " << peak_whole
              << ", streamed " << peak_stream << " (" << double(peak_stream) / double(peak_whole)
              << "x); the whole-clip frame buffer " << buffer << "\n";
    EXPECT_GT(pieces, 1);
    EXPECT_LT(peak_stream, peak_whole);
    EXPECT_LE(peak_stream, peak_whole - buffer / 2) << "streaming saves at least half the clip buffer";
}
