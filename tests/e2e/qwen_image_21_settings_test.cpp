// Every setting is honoured or refused: for the keys whose effect lives in the model kit, a run with the value
// changed must differ in what the report (or the exit code) shows. ddo-host on the parity fixture checkpoint.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "e2e/host_run.hpp"
#include "e2e/png_read.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kFixtures = QI21_FIXTURE_DIR;

struct SettingsRun : ddo::test::HostRun {
    std::vector<uint8_t> pixels;  // the PNG's pixels (the file's hash differs by its text chunks)
};

SettingsRun run_host(const std::string & tag, const std::string & extra) {
    SettingsRun r;
    static_cast<ddo::test::HostRun &>(r) = ddo::test::run_ddo_host(
        "settings_" + tag,
        "--plugin qwen_image --preset low_ram_safe.toml --model '" + (kFixtures / "checkpoint").string() +
            "' --prompt-embeds '" + (kFixtures / "prompt_embeds.safetensors").string() + "' --steps 2 --width 64 --height 64 " +
            extra,
        [&](const fs::path & dir) { r.pixels = ddo::test::read_png(dir / "image.png").pixels; });
    return r;
}

const json & engine_counters(const SettingsRun & r) {
    return r.report.at("counters").at("transformer").at("engine").at("counters");
}

const std::vector<uint8_t> & image(const SettingsRun & r) { return r.pixels; }

}  // namespace

// components.<c>.use_stream: group routes upload one group ahead (hits), or synchronously (every acquire a miss).
TEST(Qi21Settings, UseStreamFalseMakesGroupUploadsSynchronous) {
    const auto on = run_host("stream_on", "--set components.transformer.route=group_block");
    const auto off = run_host("stream_off", "--set components.transformer.route=group_block --set components.transformer.use_stream=false");
    ASSERT_EQ(on.exit_code, 0) << on.log;
    ASSERT_EQ(off.exit_code, 0) << off.log;
    const auto & pon = on.report.at("counters").at("transformer").at("placement").at("prefetch");
    const auto & poff = off.report.at("counters").at("transformer").at("placement").at("prefetch");
    EXPECT_EQ(pon.at("depth"), 1);
    EXPECT_EQ(poff.at("depth"), 0);
    EXPECT_NE(poff.at("reason").get<std::string>().find("use_stream = false"), std::string::npos) << poff.dump();
    // Two blocks in two slots: with the stream block 1 is prefetched while block 0 runs (one miss in all); without
    // it each block is uploaded when acquired (a miss each, the first step).
    EXPECT_EQ(engine_counters(on).at("misses").get<int>(), 1) << engine_counters(on).dump();
    EXPECT_EQ(engine_counters(off).at("misses").get<int>(), 2) << engine_counters(off).dump();
    ASSERT_FALSE(image(on).empty());
    EXPECT_EQ(image(on), image(off)) << "how weights arrive must not change the image";
}

// capacities.prefetch_depth = 0 on the dynamic route: streamed blocks are uploaded when acquired.
TEST(Qi21Settings, PrefetchDepthZeroStreamsOnDemand) {
    const std::string streamed = "--set components.transformer.resident_budget_gb=0.00003 ";
    const auto ahead = run_host("prefetch1", streamed + "--set capacities.prefetch_depth=1");
    const auto none = run_host("prefetch0", streamed + "--set capacities.prefetch_depth=0");
    ASSERT_EQ(ahead.exit_code, 0) << ahead.log;
    ASSERT_EQ(none.exit_code, 0) << none.log;
    const auto & plan = none.report.at("counters").at("transformer").at("engine").at("plan");
    EXPECT_EQ(plan.at("prefetch_depth"), 0) << plan.dump();
    EXPECT_GT(engine_counters(none).at("misses").get<int>(), engine_counters(ahead).at("misses").get<int>());
    EXPECT_EQ(image(ahead), image(none));
}

// components.<c>.blocks_per_group: group_block moves N blocks as one engine group; other routes refuse it.
TEST(Qi21Settings, BlocksPerGroupMergesGroupsOrIsRefused) {
    const auto one = run_host("bpg1", "--set components.transformer.route=group_block");
    const auto two = run_host("bpg2", "--set components.transformer.route=group_block --set components.transformer.blocks_per_group=2");
    ASSERT_EQ(one.exit_code, 0) << one.log;
    ASSERT_EQ(two.exit_code, 0) << two.log;
    EXPECT_EQ(one.report.at("counters").at("transformer").at("execution_groups"), 2);
    EXPECT_EQ(two.report.at("counters").at("transformer").at("execution_groups"), 1);
    EXPECT_EQ(two.report.at("counters").at("transformer").at("placement").at("blocks_per_group"), 2);
    EXPECT_EQ(image(one), image(two)) << "grouping blocks must not change the image";
    const auto refused = run_host("bpg_dynamic", "--set components.transformer.blocks_per_group=2");
    EXPECT_EQ(refused.exit_code, 2) << refused.log;
    EXPECT_NE(refused.log.find("components.transformer.blocks_per_group"), std::string::npos) << refused.log;
    EXPECT_EQ(refused.report.at("status"), "failed");
}

// runtime.generation_repeats: the generation really repeats on weights loaded once; its phases are its own.
TEST(Qi21Settings, GenerationRepeatsRepeatWithTheirOwnPhases) {
    const auto once = run_host("gen1", "");
    const auto twice = run_host("gen2", "--set runtime.generation_repeats=2");
    ASSERT_EQ(once.exit_code, 0) << once.log;
    ASSERT_EQ(twice.exit_code, 0) << twice.log;
    auto names = [](const SettingsRun & r) {
        std::vector<std::string> n;
        for (const auto & p : r.report.at("phases")) n.push_back(p.at("name"));
        return n;
    };
    const auto n1 = names(once), n2 = names(twice);
    EXPECT_EQ(std::count(n1.begin(), n1.end(), "denoise (generation 2)"), 0);
    EXPECT_EQ(std::count(n2.begin(), n2.end(), "denoise (generation 2)"), 1);
    EXPECT_EQ(std::count(n2.begin(), n2.end(), "decode (generation 2)"), 1);
    EXPECT_EQ(twice.report.at("steps").size(), 2 * once.report.at("steps").size());
    const auto & g = twice.report.at("notes").at("generations");
    ASSERT_EQ(g.size(), 1u);
    EXPECT_TRUE(g[0].at("identical_to_generation_1").get<bool>());
    EXPECT_EQ(twice.report.at("outputs").size(), 1u) << "generation 2 is compared, not written again";
    // Loaded once: the transformer was unloaded in the last generation's denoise phase.
    EXPECT_EQ(twice.report.at("counters").at("transformer").at("unloaded_in_phase"), "denoise (generation 2)");
}

// Keys the original DDO had and nothing here reads are gone from the schema: setting one is an unknown key.
TEST(Qi21Settings, KeysWithoutAReaderAreRefused) {
    for (const char * key : {"planner.small_tensor_threshold_kb=1", "runtime.cache_pinned_weights=true",
                             "runtime.pre_vae_cleanup_repeats=2"}) {
        const auto r = run_host("gone", std::string("--set ") + key);
        EXPECT_EQ(r.exit_code, 2) << key << "\n" << r.log;
        EXPECT_NE(r.log.find("unknown key"), std::string::npos) << key << "\n" << r.log;
    }
}

// vae.strategy = tiled on an image that fits one tile decodes in one piece (as diffusers' decode does): the report's
// route note, the VAE's counters and `report summarize` say why the executed strategy is not the requested one.
TEST(Qi21Settings, TiledVaeOnAnImageThatFitsOneTileSaysWhyItRanResident) {
    std::string summary;
    const auto r = ddo::test::run_ddo_host(
        "vae_one_tile",
        "--plugin qwen_image --preset low_ram_safe.toml --model '" + (kFixtures / "checkpoint").string() +
            "' --prompt-embeds '" + (kFixtures / "prompt_embeds.safetensors").string() +
            "' --steps 2 --width 64 --height 64 --set vae.strategy=tiled",
        [&](const fs::path & dir) {
            const std::string cmd = std::string("'") + DDO_HOST_BIN + "' report summarize '" + (dir / "report.json").string() +
                                    "' > '" + (dir / "summary").string() + "' 2>&1";
            ASSERT_EQ(std::system(cmd.c_str()), 0);
            std::ifstream in(dir / "summary");
            summary.assign(std::istreambuf_iterator<char>(in), {});
        });
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto & route = r.report.at("routes").at("vae");
    EXPECT_EQ(route.at("intended"), "tiled") << route.dump();
    EXPECT_EQ(route.at("executed"), "resident") << route.dump();
    const std::string why = "the image (64x64) fits in one tile (";  // the tile size is the preset's
    EXPECT_NE(route.at("executed_note").get<std::string>().find(why), std::string::npos) << route.dump();
    const auto & vae = r.report.at("counters").at("vae");
    EXPECT_NE(vae.at("reason").get<std::string>().find(why), std::string::npos) << vae.dump();
    const auto line = summary.find("vae              intended tiled");
    ASSERT_NE(line, std::string::npos) << summary;
    EXPECT_NE(summary.substr(line, summary.find('\n', line) - line).find(why), std::string::npos) << summary;
}

// A decode in pieces hands the C heap's free pages back after every piece (Note [Host heap between pieces]): the
// decode phase's note counts one release per tile and the RSS they returned (a measure, so only its type is checked).
TEST(Qi21Settings, TiledDecodeReleasesTheHeapAfterEachTile) {
    const auto r = ddo::test::run_ddo_host(
        "vae_heap_release",
        "--plugin qwen_image --preset low_ram_safe.toml --model '" + (kFixtures / "checkpoint").string() +
            "' --prompt-embeds '" + (kFixtures / "prompt_embeds.safetensors").string() +
            "' --steps 2 --width 128 --height 128 --set vae.strategy=tiled --set vae.tile_size=64 "
            "--set vae.tile_overlap=32");
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const json * decode = nullptr;
    for (const auto & p : r.report.at("phases"))
        if (p.at("name") == "decode") decode = &p;
    ASSERT_NE(decode, nullptr) << r.report.at("phases").dump();
    const auto & note = decode->at("notes").at("host_heap_release");
    // 128 px in tiles of 64 at stride 32: 4 x 4 tiles.
    EXPECT_EQ(note.at("releases").get<int>(), 16) << note.dump();
    EXPECT_TRUE(note.at("rss_drop_bytes").is_number_integer()) << note.dump();
    EXPECT_TRUE(note.at("largest_rss_drop_bytes").is_number_integer()) << note.dump();
}
