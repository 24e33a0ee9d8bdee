// ddo-host runs qwen_image_21 on the parity fixture checkpoint (tiny config, built by target
// qwen_image_21_fixtures) and the run report says how the preset's capacities reached the engine:
// capacities.allocator_backend requested vs used, the allocator plugin's options passed to pool_create, and the
// host staging both routes went through (docs/metrics.md, "Placement" and "Host staging"); and what the report
// says of a run's load checks and torch memory monitors.
#include <gtest/gtest.h>


#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ddo/torch/cuda_transport.hpp"
#include "e2e/host_run.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = QI21_FIXTURE_DIR;

using ddo::test::HostRun;

HostRun run_host(const std::string & tag, const std::string & extra, const fs::path & model = kFixtures / "checkpoint",
                 const std::string & preset = "low_ram_safe.toml") {
    return ddo::test::run_ddo_host("placement_" + tag, "--plugin qwen_image --preset " + preset + " --model '" +
                                                           model.string() + "' --prompt-embeds '" +
                                                           (kFixtures / "prompt_embeds.safetensors").string() +
                                                           "' --steps 2 --width 64 --height 64 " + extra);
}

class Qi21Placement : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_TRUE(fs::exists(kFixtures / "checkpoint" / "model_index.json"))
            << kFixtures << " has no checkpoint: build target qwen_image_21_fixtures (tools/ddo build)";
    }
};

}  // namespace

TEST_F(Qi21Placement, HostBackendRunsOnTheCpuWithHostStagingRecorded) {
    HostRun r = run_host("host", "--set capacities.allocator_backend=host");
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto & t = r.report.at("counters").at("transformer");
    const auto & p = t.at("placement");
    EXPECT_EQ(p.at("allocator_backend").at("requested"), "host");
    EXPECT_EQ(p.at("allocator_backend").at("requested_source"), "--set capacities.allocator_backend=host");
    EXPECT_EQ(p.at("allocator_backend").at("used"), "host");
    EXPECT_EQ(p.at("device"), "cpu");
    EXPECT_EQ(p.at("transport"), "cpu");
    EXPECT_EQ(p.at("allocator").at("used"), "linear");
    EXPECT_TRUE(p.at("allocator_options").empty());
    EXPECT_EQ(p.at("host_staging").at("created"), true);
    const auto & e = t.at("engine");
    EXPECT_EQ(e.at("allocator").at("backend"), "host");
    const auto & hs = e.at("host_staging");
    EXPECT_EQ(hs.at("backend"), "host");
    // low_ram_safe: host_registration = off -> the engine never asks the registration route.
    EXPECT_EQ(hs.at("limits").at("registration"), "off");
    EXPECT_EQ(hs.at("registration").at("attempts"), 0);
    // low_ram_safe: pin_host_memory = false -> the pinned route is off and never asked. The tiny transformer is
    // resident, and on the CPU its groups are read in place from the file mapping (Note [Mapped residents]): no
    // staging buffer at all (the copy path with pageable staging is engine_pin_off_test's).
    EXPECT_EQ(hs.at("limits").at("pinned_route"), "off") << hs.dump();
    EXPECT_EQ(hs.at("limits").at("pinned_route_reason"), "capacities.pin_host_memory = false");
    EXPECT_EQ(hs.at("pinned").at("attempts"), 0) << hs.dump();
    const auto & c = e.at("counters");
    EXPECT_GT(c.at("mapped_bytes").get<std::uint64_t>(), 0u) << c.dump();
    EXPECT_EQ(c.at("staging_bytes").get<std::uint64_t>(), 0u) << c.dump();
    EXPECT_EQ(c.at("staging_pinned_bytes"), 0) << c.dump();
    EXPECT_EQ(c.at("pinned_fallbacks"), 0) << c.dump();
}

// Every denoise step says what each component's engine did in it (docs/metrics.md, steps[].extra): the bytes it
// streamed and the compute time stalled on uploads. diffusers_offload_compat streams one block per group through
// two slots.
TEST_F(Qi21Placement, StepsRecordTheBytesStreamedAndTheStallOfEachComponent) {
    HostRun r = run_host("steps", "--set capacities.allocator_backend=host", kFixtures / "checkpoint",
                         "diffusers_offload_compat.toml");
    ASSERT_EQ(r.exit_code, 0) << r.log;
    std::uint64_t streamed = 0;
    int denoise_steps = 0;
    for (const auto & s : r.report.at("steps")) {
        if (s.at("phase") != "denoise") continue;
        ++denoise_steps;
        const auto & t = s.at("extra").at("engine").at("transformer");
        ASSERT_TRUE(t.at("bytes_streamed").is_number_unsigned()) << s.dump();
        ASSERT_TRUE(t.at("stall_s").is_number()) << s.dump();
        EXPECT_GE(t.at("stall_s").get<double>(), 0.0);
        streamed += t.at("bytes_streamed").get<std::uint64_t>();
    }
    EXPECT_EQ(denoise_steps, 2);
    const auto & c = r.report.at("counters").at("transformer").at("engine").at("counters");
    const auto & moved = c.at("bytes_moved");
    EXPECT_EQ(streamed, moved.at("resident").get<std::uint64_t>() + moved.at("pinned").get<std::uint64_t>() +
                            moved.at("pageable").get<std::uint64_t>() + moved.at("file").get<std::uint64_t>())
        << "the steps' bytes add up to the run's: " << c.dump();
    EXPECT_GT(streamed, 0u);
    EXPECT_TRUE(c.at("link").is_object()) << c.dump();
}

// capacities.resident_budget_gb = 0 is auto (one_shot_fast sets it so): the planner balances the residents against
// the device capacity, it does not read "0 bytes" and stream every block (which it did).
TEST_F(Qi21Placement, AutoResidentBudgetKeepsWhatTheDeviceHolds) {
    HostRun r = run_host("auto_resident", "--set capacities.allocator_backend=host", kFixtures / "checkpoint",
                         "one_shot_fast.toml");
    ASSERT_EQ(r.exit_code, 0) << r.log;
    const auto & plan = r.report.at("counters").at("transformer").at("engine").at("plan");
    EXPECT_EQ(r.report.at("settings").at("effective_components").at("transformer").at("resident_budget_gb"), 0.0);
    for (const auto & g : plan.at("groups")) {
        EXPECT_EQ(g.at("residency"), "resident") << plan.dump();
        EXPECT_NE(g.at("reason").get<std::string>().find("fits the device capacity"), std::string::npos) << g.dump();
    }
    EXPECT_GT(plan.at("resident_bytes").get<std::uint64_t>(), 0u);
}

TEST_F(Qi21Placement, CudaBackendWithoutADeviceIsAUsageErrorNamingTheKey) {
    std::string why;
    if (ddo::torch::cuda_available(&why)) GTEST_SKIP() << "a CUDA device is usable; the refusal is tested on CPU-only machines";
    HostRun r = run_host("cuda", "--set capacities.allocator_backend=cuda");
    EXPECT_EQ(r.exit_code, 2) << r.log;
    const std::string msg = r.report.at("error").at("message").get<std::string>();
    EXPECT_NE(msg.find("capacities.allocator_backend = \"cuda\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("--set capacities.allocator_backend=host"), std::string::npos) << msg;
}

TEST_F(Qi21Placement, AllocatorOptionsReachThePlugin) {
    // linear has no pool options: the option is passed (recorded) and refused by the plugin at pool creation.
    HostRun r = run_host("opts", "--set plugin.linear.cache_released=false --set capacities.allocator_backend=host");
    EXPECT_EQ(r.exit_code, 4) << r.log;
    EXPECT_NE(r.report.at("error").at("message").get<std::string>().find("plugin.linear.*: cache_released"), std::string::npos)
        << r.report.at("error").dump();
    const auto & opts = r.report.at("counters").at("transformer").at("placement").at("allocator_options");
    EXPECT_EQ(opts.at("cache_released").at("value"), "false");
}

TEST_F(Qi21Placement, CpuRunsRecordWhyTheTorchMonitorsAreNull) {
    HostRun r = run_host("torchmem", "--set capacities.allocator_backend=host");
    ASSERT_EQ(r.exit_code, 0) << r.log;
    for (const char * m : {"torch_allocated", "torch_reserved"}) {
        const auto & mon = r.report.at("memory").at(m);
        EXPECT_TRUE(mon.at("peak_bytes").is_null()) << m;  // unavailable, never 0
        EXPECT_NE(mon.at("reason").get<std::string>().find("computes on the cpu"), std::string::npos) << mon.dump();
    }
}

// The VAE decoder's tensors are checked from the header when the checkpoint opens: a dry run (nothing computed)
// already fails, with exit 4, naming tensor and file, and the report is written with status failed.
TEST_F(Qi21Placement, ABrokenVaeTensorFailsAtLoadNotAfterDenoising) {
    const fs::path model = fs::temp_directory_path() / ("ddo_qi21_badvae_" + std::to_string(::getpid()));
    fs::remove_all(model);
    fs::copy(kFixtures / "checkpoint", model, fs::copy_options::recursive);
    const fs::path st = model / "vae" / "diffusion_pytorch_model.safetensors";
    ASSERT_TRUE(fs::exists(st));
    // Same-size edit of the header: decoder.conv_in.weight's dtype F32 -> I32 (4 bytes per element either way).
    std::fstream f(st, std::ios::in | std::ios::out | std::ios::binary);
    uint64_t n = 0;
    f.read(reinterpret_cast<char *>(&n), 8);
    std::string header(n, '\0');
    f.read(header.data(), std::streamsize(n));
    auto h = nlohmann::json::parse(header);
    ASSERT_TRUE(h.contains("decoder.conv_in.weight")) << "fixture VAE lacks decoder.conv_in.weight";
    ASSERT_EQ(h["decoder.conv_in.weight"]["dtype"], "F32");
    h["decoder.conv_in.weight"]["dtype"] = "I32";
    std::string edited = h.dump();
    ASSERT_LE(edited.size(), n);
    edited.resize(n, ' ');
    f.seekp(8);
    f.write(edited.data(), std::streamsize(n));
    f.close();

    HostRun r = run_host("badvae", "--dry-run --set capacities.allocator_backend=host", model);
    fs::remove_all(model);
    EXPECT_EQ(r.exit_code, 4) << r.log;
    EXPECT_EQ(r.report.at("status"), "failed");
    const std::string msg = r.report.at("error").at("message").get<std::string>();
    EXPECT_NE(msg.find("decoder.conv_in.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find(st.string()), std::string::npos) << msg;
}

namespace {

// A faked /proc and /sys (DDO_ADMISSION_ROOT, docs/validation.md) whose memory cgroup v2 is over its limit: usage
// 600 MiB against memory.max 512 MiB, so the host memory the CPU transport plans on is 0.
fs::path fake_cgroup_tree(const fs::path & root) {
    auto write = [&](const std::string & rel, const std::string & text) {
        fs::create_directories((root / rel).parent_path());
        std::ofstream(root / rel) << text;
    };
    write("proc/sys/vm/overcommit_memory", "0\n");
    write("proc/meminfo", "MemTotal:       33554432 kB\nMemAvailable:   16777216 kB\nCommitLimit:    33554432 kB\n"
                          "Committed_AS:   2097152 kB\n");
    write("proc/self/status", "Name:\tddo-host\nVmSize:\t  102400 kB\nVmLck:\t       0 kB\n");
    write("proc/self/cgroup", "0::/ddo.slice/run\n");
    write("sys/fs/cgroup/cgroup.controllers", "cpu io memory pids\n");
    write("sys/fs/cgroup/ddo.slice/memory.max", "max\n");
    write("sys/fs/cgroup/ddo.slice/memory.current", "629145600\n");
    write("sys/fs/cgroup/ddo.slice/run/memory.max", "536870912\n");
    write("sys/fs/cgroup/ddo.slice/run/memory.current", "629145600\n");
    return root;
}

}  // namespace

// Issue 16: the planner and admission observe the process's own memory cgroup. Under a limit below what the model
// needs the run fails before any step with exit 4 (the environment's limit, not the preset's), and the report's
// error names the cgroup, its limit and usage.
TEST_F(Qi21Placement, ACgroupLimitBelowTheModelsNeedsFailsWithExit4NamingIt) {
    const fs::path tree = fake_cgroup_tree(fs::temp_directory_path() / ("ddo_fake_cgroup_" + std::to_string(::getpid())));
    const fs::path dir = fs::temp_directory_path() / ("ddo_cgroup_run_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string cmd = "DDO_ADMISSION_ROOT='" + tree.string() + "' '" + DDO_HOST_BIN +
                            "' --plugin qwen_image --preset low_ram_safe.toml --model '" + (kFixtures / "checkpoint").string() +
                            "' --prompt-embeds '" + (kFixtures / "prompt_embeds.safetensors").string() +
                            "' --steps 2 --width 64 --height 64 --output '" + dir.string() + "' > '" + (dir / "log").string() +
                            "' 2>&1";
    const int st = std::system(cmd.c_str());
    std::ifstream lin(dir / "log");
    const std::string log((std::istreambuf_iterator<char>(lin)), {});
    EXPECT_EQ(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 4) << log;
    ASSERT_TRUE(fs::exists(dir / "ddo_report.json")) << log;
    const auto r = nlohmann::json::parse(std::ifstream(dir / "ddo_report.json"));
    EXPECT_EQ(r.at("status"), "failed");
    const std::string msg = r.at("error").at("message");
    EXPECT_NE(msg.find("memory cgroup v2 " + (tree / "sys/fs/cgroup/ddo.slice/run").string() + " limit 512.0 MiB - usage 600.0 MiB"),
              std::string::npos) << msg;
    EXPECT_NE(msg.find("a larger memory cgroup limit"), std::string::npos) << msg;
    EXPECT_TRUE(r.at("steps").empty()) << "refused before any step";
    EXPECT_FALSE(fs::exists(dir / "image.png"));
    // The admission record says which tree it read.
    EXPECT_NE(r.at("admission").at("cgroup").at("memory_max").dump().find(tree.string()), std::string::npos)
        << r.at("admission").dump();
    fs::remove_all(dir);
    fs::remove_all(tree);
}

// Note [Converted residents]: the fp32 fixture computed in bf16. On the resident route each resident group is
// converted once (the plan budgets it at its bf16 size) and its file pages are handed back; the disk route keeps no
// residents and converts at each acquire, and says so. (The images are not compared: bf16 on the CPU is not bitwise
// repeatable here — two resident runs of this fixture gave different sha256s — unlike fp32, whose routes are equal.)
TEST_F(Qi21Placement, ResidentsInAnotherDtypeAreConvertedOnceAndTheReportSaysWhichRan) {
    const std::string bf16 = "--set workload.precision=bf16 --set capacities.allocator_backend=host ";
    HostRun res = run_host("convert_resident", bf16 + "--set components.transformer.route=resident", kFixtures / "checkpoint", "off.toml");
    HostRun disk = run_host("convert_disk", bf16 + "--set components.transformer.route=disk", kFixtures / "checkpoint", "off.toml");
    ASSERT_EQ(res.exit_code, 0) << res.log;
    ASSERT_EQ(disk.exit_code, 0) << disk.log;
    const auto & rc = res.report.at("counters").at("transformer").at("conversion");
    EXPECT_EQ(rc.at("dtype"), "BFloat16") << rc.dump();
    EXPECT_EQ(rc.at("once"), true) << rc.dump();
    EXPECT_TRUE(rc.at("reason").is_null()) << rc.dump();
    EXPECT_GT(rc.at("converted_bytes").get<std::uint64_t>(), 0u) << rc.dump();
    // fp32 -> bf16 halves every converted tensor; the mapped pages of tensors of a page or more are handed back.
    EXPECT_GT(rc.at("released_file_bytes").get<std::uint64_t>(), 0u) << rc.dump();
    const auto & plan_notes = res.report.at("counters").at("transformer").at("engine").at("plan").at("notes");
    EXPECT_NE(plan_notes.dump().find("converted once"), std::string::npos) << plan_notes.dump();
    const auto & dc = disk.report.at("counters").at("transformer").at("conversion");
    EXPECT_EQ(dc.at("once"), false) << dc.dump();
    EXPECT_NE(dc.at("reason").get<std::string>().find("keeps no residents"), std::string::npos) << dc.dump();
    EXPECT_EQ(dc.at("converted_bytes"), 0) << dc.dump();
}
