// Preset resolution: each layer beats the one below, provenance, auto on faked platforms, and every
// error class with its file:line:col.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>

#include "ddo/preset/preset_resolver.hpp"
#include "ddo/preset/preset_schema.hpp"

namespace fs = std::filesystem;
using namespace ddo;

namespace {

class PresetTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("ddo_preset_test_" + std::to_string(::getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    fs::path write(const std::string & name, const std::string & text) {
        auto p = dir_ / name;
        std::ofstream(p) << text;
        return p;
    }
    ResolveRequest request(const std::string & preset) {
        ResolveRequest rq;
        rq.preset = preset;
        rq.preset_dirs = {dir_};
        rq.platform = PlatformInfo{Platform::linux_native, "test"};
        return rq;
    }
    // Runs resolution and returns the PresetError (fails the test when none is thrown).
    PresetError error_of(const ResolveRequest & rq) {
        try {
            resolve_settings(rq);
        } catch (const PresetError & e) {
            return e;
        }
        ADD_FAILURE() << "expected a PresetError";
        return PresetError("", 0, 0, "", "");
    }
    fs::path dir_;
};

const fs::path kShipped = fs::path(DDO_SOURCE_DIR) / "presets";

TEST_F(PresetTest, DefaultsWhenNoPreset) {
    auto s = resolve_settings(request(""));
    EXPECT_EQ(s.get<int>("capacities.staging_slots"), 2);
    EXPECT_EQ(s.at("capacities.staging_slots").provenance.layer, SettingLayer::builtin_default);
    EXPECT_EQ(s.route("transformer"), Route::component);
    EXPECT_FALSE(s.get_optional<int>("workload.steps").has_value());
}

TEST_F(PresetTest, PresetBeatsDefaultWithFileLine) {
    auto p = write("p.toml", "schema_version = 1\n[capacities]\nstaging_slots = 4\n");
    auto s = resolve_settings(request(p.string()));
    EXPECT_EQ(s.get<int>("capacities.staging_slots"), 4);
    const auto & pv = s.at("capacities.staging_slots").provenance;
    EXPECT_EQ(pv.layer, SettingLayer::preset);
    EXPECT_EQ(fs::path(pv.source).filename(), "p.toml");
    EXPECT_EQ(pv.line, 3);
    EXPECT_EQ(pv.column, 17);
    EXPECT_EQ(s.preset().effective, "p");
    EXPECT_EQ(s.preset().file_sha256.size(), 64u);
}

TEST_F(PresetTest, ChildBeatsParentAndKeepsParentProvenance) {
    write("base.toml", "schema_version = 1\n[capacities]\nstaging_slots = 3\nprefetch_depth = 2\n");
    auto child = write("child.toml", "schema_version = 1\ninherits = \"base\"\n[capacities]\nstaging_slots = 5\n");
    auto s = resolve_settings(request(child.string()));
    EXPECT_EQ(s.get<int>("capacities.staging_slots"), 5);
    EXPECT_EQ(fs::path(s.at("capacities.staging_slots").provenance.source).filename(), "child.toml");
    EXPECT_EQ(s.get<int>("capacities.prefetch_depth"), 2);
    EXPECT_EQ(fs::path(s.at("capacities.prefetch_depth").provenance.source).filename(), "base.toml");
    EXPECT_EQ(s.at("capacities.prefetch_depth").provenance.line, 4);
    ASSERT_EQ(s.preset().chain.size(), 2u);
}

TEST_F(PresetTest, EnvironmentBeatsPreset) {
    auto p = write("p.toml", "schema_version = 1\n[capacities]\nstaging_slots = 4\n[components.transformer]\nroute = \"dynamic\"\n");
    auto rq = request(p.string());
    rq.environment = {{"DDO_CAPACITIES_STAGING_SLOTS", "7"}, {"DDO_TRANSFORMER_ROUTE", "disk"}, {"DDO_UNRELATED", "x"}};
    auto s = resolve_settings(rq);
    EXPECT_EQ(s.get<int>("capacities.staging_slots"), 7);
    EXPECT_EQ(s.at("capacities.staging_slots").provenance.layer, SettingLayer::environment);
    EXPECT_EQ(s.at("capacities.staging_slots").provenance.source, "DDO_CAPACITIES_STAGING_SLOTS");
    EXPECT_EQ(s.route("transformer"), Route::disk);
}

TEST_F(PresetTest, SetBeatsEnvironment) {
    auto p = write("p.toml", "schema_version = 1\n[capacities]\nstaging_slots = 4\n");
    auto rq = request(p.string());
    rq.environment = {{"DDO_CAPACITIES_STAGING_SLOTS", "7"}};
    rq.sets = {"capacities.staging_slots=9"};
    auto s = resolve_settings(rq);
    EXPECT_EQ(s.get<int>("capacities.staging_slots"), 9);
    EXPECT_EQ(s.at("capacities.staging_slots").provenance.layer, SettingLayer::command_line);
    EXPECT_NE(s.at("capacities.staging_slots").provenance.to_string().find("--set"), std::string::npos);
}

TEST_F(PresetTest, ComponentOverrideBeatsGlobal) {
    auto p = write("p.toml", "schema_version = 1\n[components.transformer]\nresident_budget_gb = 2\nselection = \"largest\"\n");
    auto rq = request(p.string());
    rq.sets = {"capacities.resident_budget_gb=4"};
    auto s = resolve_settings(rq);
    EXPECT_DOUBLE_EQ(s.capacities().resident_budget_gb, 4.0);
    EXPECT_DOUBLE_EQ(s.capacities("transformer").resident_budget_gb, 2.0);
    EXPECT_EQ(s.capacities("transformer").selection, Selection::largest);
    EXPECT_DOUBLE_EQ(s.capacities("vae").resident_budget_gb, 4.0);
    EXPECT_EQ(s.to_json()["effective_components"]["transformer"]["resident_budget_gb"], 2.0);
}

TEST_F(PresetTest, AutoResolvesByInjectedPlatform) {
    ResolveRequest rq;
    rq.preset = "auto";
    rq.preset_dirs = {kShipped};
    rq.platform = PlatformInfo{Platform::wsl, "fake WSL"};
    auto wsl = resolve_settings(rq);
    EXPECT_EQ(wsl.preset().requested, "auto");
    EXPECT_EQ(wsl.preset().effective, "wsl_compat");
    EXPECT_NE(wsl.preset().reason.find("wsl"), std::string::npos);
    EXPECT_EQ(wsl.get<std::string>("capacities.host_registration"), "bounded");
    rq.platform = PlatformInfo{Platform::linux_native, "fake Linux"};
    auto lin = resolve_settings(rq);
    EXPECT_EQ(lin.preset().effective, "one_shot_fast");
    EXPECT_EQ(lin.route("transformer"), Route::dynamic);
    rq.platform = PlatformInfo{Platform::other, "fake other"};
    EXPECT_EQ(resolve_settings(rq).preset().effective, "one_shot_fast");
}

TEST_F(PresetTest, DetectPlatformFromFakeProc) {
    auto root = dir_ / "proc";
    fs::create_directories(root / "sys/kernel");
    std::ofstream(root / "sys/kernel/osrelease") << "5.15.153.1-microsoft-standard-WSL2\n";
    EXPECT_EQ(detect_platform(root).platform, Platform::wsl);
    std::ofstream(root / "sys/kernel/osrelease") << "6.1.0-18-amd64\n";
    EXPECT_EQ(detect_platform(root).platform, Platform::linux_native);
    EXPECT_EQ(detect_platform(dir_ / "nope").platform, Platform::other);
    // And through the resolver, with the proc root injected.
    std::ofstream(root / "sys/kernel/osrelease") << "5.15.153.1-microsoft-standard-WSL2\n";
    ResolveRequest rq;
    rq.preset = "auto";
    rq.preset_dirs = {kShipped};
    rq.proc_root = root;
    EXPECT_EQ(resolve_settings(rq).preset().effective, "wsl_compat");
}

TEST_F(PresetTest, ErrorSyntax) {
    auto p = write("bad.toml", "schema_version = 1\n[capacities\nstaging_slots = 2\n");
    auto e = error_of(request(p.string()));
    EXPECT_EQ(fs::path(e.file()).filename(), "bad.toml");
    EXPECT_EQ(e.line(), 2);
    EXPECT_GT(e.column(), 0);
    EXPECT_NE(std::string(e.what()).find("bad.toml:2:"), std::string::npos) << e.what();
    EXPECT_NE(e.problem().find("TOML syntax"), std::string::npos);
    EXPECT_EQ(e.code(), ExitCode::usage);
}

// preset check: every error of a file, in line order (not only the first one the resolver meets).
TEST_F(PresetTest, LintReportsEveryErrorInLineOrder) {
    auto p = write("many.toml",
                   "schema_version = 1\n[vae]\ntile_size = 9000\n[capacities]\nstaging_slots = \"two\"\n"
                   "resident_budget_gbb = 3\n[components.transfomer]\nroute = \"disk\"\n");
    const auto errors = lint_preset_file(p, {});
    ASSERT_EQ(errors.size(), 4u);
    EXPECT_EQ(errors[0].line(), 3);
    EXPECT_NE(errors[0].problem().find("vae.tile_size"), std::string::npos);
    EXPECT_EQ(errors[1].line(), 5);
    EXPECT_NE(errors[1].problem().find("capacities.staging_slots"), std::string::npos);
    EXPECT_EQ(errors[2].line(), 6);
    EXPECT_NE(errors[2].problem().find("resident_budget_gbb"), std::string::npos);
    EXPECT_EQ(errors[3].line(), 7);
    EXPECT_NE(errors[3].problem().find("transfomer"), std::string::npos);
    EXPECT_TRUE(lint_preset_file(write("ok.toml", "schema_version = 1\n"), {}).empty());
    // Clean keys, broken cross-key rule: the resolution's error is the one reported.
    const auto cross = lint_preset_file(write("cross.toml", "schema_version = 1\n[vae]\ntile_size = 64\ntile_overlap = 64\n"), {});
    ASSERT_EQ(cross.size(), 1u);
    EXPECT_NE(cross[0].problem().find("tile_overlap"), std::string::npos);
}

// nan / inf in a preset file compare false with every bound; they are refused with file:line:col.
TEST_F(PresetTest, ErrorNonFiniteNumberNamesFileLineCol) {
    for (const char * v : {"nan", "inf", "-inf"}) {
        auto p = write("nan.toml", std::string("schema_version = 1\n[capacities]\nram_headroom_gb = ") + v + "\n");
        auto e = error_of(request(p.string()));
        EXPECT_EQ(e.line(), 3) << v;
        EXPECT_NE(e.problem().find("not a finite number"), std::string::npos) << e.what();
    }
}

// Plugin options carry any scalar, but never a non-finite one: a TOML nan/inf is refused with file:line:col.
TEST_F(PresetTest, ErrorNonFinitePluginOptionNamesFileLineCol) {
    auto p = write("nanopt.toml", "schema_version = 1\n[plugin.vmm]\ngranularity = nan\n");
    auto e = error_of(request(p.string()));
    EXPECT_EQ(e.line(), 3) << e.what();
    EXPECT_NE(e.problem().find("not a finite number"), std::string::npos) << e.what();
    EXPECT_NE(e.problem().find("plugin.vmm.granularity"), std::string::npos) << e.what();
}

// Issue 16: bytes that are not UTF-8 never reach toml++ (3.3 has undefined behaviour on "\xcd\x9a"): exit 2 naming
// file:line:col; the same for a --set value.
TEST_F(PresetTest, ErrorInvalidUtf8NamesFileLineColBeforeTomlSeesIt) {
    auto p = write("bytes.toml", "schema_version = 1\n[capacities]\n# caf\xcd\x9a\xff\n");
    auto e = error_of(request(p.string()));
    EXPECT_EQ(e.line(), 3) << e.what();
    EXPECT_EQ(e.column(), 7) << e.what();
    EXPECT_NE(e.problem().find("not UTF-8"), std::string::npos) << e.what();
    // The 2-byte file of issue 16 is valid UTF-8 (U+035A): toml++'s own syntax error, located.
    auto two = write("two.toml", "\xcd\x9a");
    auto e2 = error_of(request(two.string()));
    EXPECT_EQ(e2.line(), 1) << e2.what();
    EXPECT_NE(e2.problem().find("TOML syntax error"), std::string::npos) << e2.what();
    auto ctl = write("ctl.toml", "[\x01");
    auto ec = error_of(request(ctl.string()));
    EXPECT_EQ(ec.line(), 1) << ec.what();
    auto rq = request("");
    rq.sets = {"workload.prompt=\"a \xc3\x28\""};
    auto es = error_of(rq);
    EXPECT_NE(std::string(es.what()).find("not valid UTF-8"), std::string::npos) << es.what();
}

TEST_F(PresetTest, ErrorUnknownKeyWithSuggestion) {
    auto p = write("bad.toml", "schema_version = 1\n[capacities]\nstagin_slots = 2\n");
    auto e = error_of(request(p.string()));
    EXPECT_EQ(e.line(), 3);
    EXPECT_EQ(e.column(), 1);
    EXPECT_NE(e.hint().find("capacities.staging_slots"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad.toml:3:1"), std::string::npos) << e.what();
}

TEST_F(PresetTest, ErrorUnknownComponentWithSuggestion) {
    auto p = write("bad.toml", "schema_version = 1\n[components.transfomer]\nroute = \"disk\"\n");
    auto e = error_of(request(p.string()));
    EXPECT_EQ(e.line(), 2);
    EXPECT_NE(e.hint().find("transformer"), std::string::npos) << e.what();
}

TEST_F(PresetTest, ErrorWrongType) {
    auto p = write("bad.toml", "schema_version = 1\n[capacities]\nstaging_slots = \"two\"\n");
    auto e = error_of(request(p.string()));
    EXPECT_EQ(e.line(), 3);
    EXPECT_EQ(e.column(), 17);
    EXPECT_NE(e.problem().find("expected integer"), std::string::npos) << e.what();
}

TEST_F(PresetTest, ErrorOutOfRange) {
    auto p = write("bad.toml", "schema_version = 1\n\n[capacities]\nstaging_slots = 0\n");
    auto e = error_of(request(p.string()));
    EXPECT_EQ(e.line(), 4);
    EXPECT_EQ(e.column(), 17);
    EXPECT_NE(e.problem().find("out of range"), std::string::npos);
    EXPECT_NE(e.hint().find("[1, 64]"), std::string::npos) << e.what();
}

TEST_F(PresetTest, ErrorInvalidEnumSuggestsNearest) {
    auto p = write("bad.toml", "schema_version = 1\n[components.transformer]\nroute = \"dynamc\"\n");
    auto e = error_of(request(p.string()));
    EXPECT_EQ(e.line(), 3);
    EXPECT_NE(e.hint().find("'dynamic'"), std::string::npos) << e.what();
}

TEST_F(PresetTest, ErrorUnsupportedByPlugin) {
    auto p = write("p.toml", "schema_version = 1\n[plugin.fake]\ncfg_scale = 2.0\nbogus = 1\n[plugin.other]\nanything = 1\n");
    auto rq = request(p.string());
    rq.plugin_name = "fake";
    rq.supported_options = std::vector<std::string>{"fake.cfg_*"};
    auto e = error_of(rq);
    EXPECT_EQ(e.line(), 4);
    EXPECT_EQ(e.column(), 1);
    EXPECT_NE(e.problem().find("not supported by plugin 'fake'"), std::string::npos) << e.what();
    // Supported keys pass; another plugin's table is kept unchecked.
    rq.supported_options = std::vector<std::string>{"fake.*"};
    auto s = resolve_settings(rq);
    EXPECT_EQ(s.plugin_options("fake").at("cfg_scale").value, 2.0);
    EXPECT_TRUE(s.has("plugin.other.anything"));
    // Also from --set.
    rq.supported_options = std::vector<std::string>{"plugin.fake.cfg_scale"};
    rq.sets = {"plugin.fake.nope=1"};
    p = write("p2.toml", "schema_version = 1\n");
    rq.preset = p.string();
    auto e2 = error_of(rq);
    EXPECT_EQ(e2.file(), "--set plugin.fake.nope=1");
}

TEST_F(PresetTest, ErrorInheritsCycle) {
    write("a.toml", "schema_version = 1\ninherits = \"b\"\n");
    write("b.toml", "schema_version = 1\n\ninherits = \"a.toml\"\n");
    auto e = error_of(request("a"));
    EXPECT_EQ(fs::path(e.file()).filename(), "b.toml");
    EXPECT_EQ(e.line(), 3);
    EXPECT_EQ(e.column(), 12);
    EXPECT_NE(e.problem().find("cycle: a.toml -> b.toml -> a.toml"), std::string::npos) << e.what();
}

TEST_F(PresetTest, ErrorMissingFile) {
    auto p = write("p.toml", "schema_version = 1\ninherits = [\"low_ram_saf\"]\n");
    auto rq = request(p.string());
    rq.preset_dirs = {kShipped};
    auto e = error_of(rq);
    EXPECT_EQ(e.line(), 2);
    EXPECT_EQ(e.column(), 12);
    EXPECT_NE(e.hint().find("low_ram_safe"), std::string::npos) << e.what();
    // The requested preset itself.
    auto e2 = error_of(request("no_such_preset"));
    EXPECT_EQ(e2.file(), "no_such_preset");
    EXPECT_NE(e2.problem().find("not found"), std::string::npos);
}

TEST_F(PresetTest, ErrorMissingSchemaVersion) {
    auto p = write("p.toml", "[capacities]\nstaging_slots = 2\n");
    auto e = error_of(request(p.string()));
    EXPECT_EQ(e.line(), 1);
    EXPECT_EQ(e.column(), 1);
}

TEST_F(PresetTest, ErrorBoundedRegistrationNeedsCeiling) {
    auto p = write("p.toml", "schema_version = 1\n[capacities]\nhost_registration = \"bounded\"\n");
    auto e = error_of(request(p.string()));
    EXPECT_EQ(e.line(), 3);
    EXPECT_NE(e.problem().find("host_registration_ceiling_gb"), std::string::npos);
}

TEST_F(PresetTest, ErrorFromEnvironmentAndSetNameTheirSource) {
    auto rq = request("");
    rq.environment = {{"DDO_CAPACITIES_STAGING_SLOTS", "many"}};
    auto e = error_of(rq);
    EXPECT_EQ(e.file(), "environment DDO_CAPACITIES_STAGING_SLOTS");
    rq.environment.clear();
    rq.sets = {"capacities.stagingslots=2"};
    auto e2 = error_of(rq);
    EXPECT_NE(e2.hint().find("capacities.staging_slots"), std::string::npos);
    rq.sets = {"novalue"};
    EXPECT_NE(error_of(rq).problem().find("key=value"), std::string::npos);
}

TEST_F(PresetTest, ShippedPresetsResolveWithDescriptions) {
    for (const char * name : {"auto", "one_shot_fast", "low_ram_safe", "wsl_compat", "warm_process",
                              "diffusers_offload_compat", "diffusers_leaf_offload_compat", "off"}) {
        ResolveRequest rq;
        rq.preset = name;
        rq.preset_dirs = {kShipped};
        rq.platform = PlatformInfo{Platform::linux_native, "test"};
        ResolvedSettings s;
        ASSERT_NO_THROW(s = resolve_settings(rq)) << name;
        EXPECT_FALSE(s.preset().description.empty()) << name;
    }
    ResolveRequest rq;
    rq.preset_dirs = {kShipped};
    rq.preset = "diffusers_offload_compat";
    auto d = resolve_settings(rq);
    EXPECT_EQ(d.route("transformer"), Route::group_block);
    EXPECT_EQ(d.route("text_encoder"), Route::group_leaf);
    rq.preset = "diffusers_leaf_offload_compat";
    EXPECT_EQ(resolve_settings(rq).route("transformer"), Route::group_leaf);
    rq.preset = "low_ram_safe";
    auto l = resolve_settings(rq);
    EXPECT_EQ(l.route("transformer"), Route::dynamic);
    EXPECT_EQ(l.capacities().host_registration, HostRegistration::off);
    EXPECT_DOUBLE_EQ(l.capacities().resident_budget_gb, 3.0);
    EXPECT_EQ(l.vae_strategy().kind, VaeStrategyKind::tiled);
    rq.preset = "off";
    EXPECT_EQ(resolve_settings(rq).route("transformer"), Route::resident);
    rq.preset = "warm_process";
    auto w = resolve_settings(rq);
    EXPECT_EQ(w.get<int>("runtime.generation_repeats"), 2);
    EXPECT_DOUBLE_EQ(w.capacities().ram_headroom_gb, 6.0);  // child beats one_shot_fast's 8
}

// capacities.pin_host_memory: default true; low_ram_safe and wsl_compat switch pinning off (the anchor's
// DDO_PIN_CPU_MEMORY = 0 for both), with the file:line:col of the key; every layer can set it.
TEST_F(PresetTest, PinHostMemoryDefaultPresetsAndProvenance) {
    auto d = resolve_settings(request(""));
    EXPECT_TRUE(d.capacities().pin_host_memory);
    EXPECT_TRUE(d.capacities("transformer").pin_host_memory);
    EXPECT_EQ(d.get<bool>("capacities.pin_host_memory"), true);
    EXPECT_EQ(d.at("capacities.pin_host_memory").provenance.layer, SettingLayer::builtin_default);

    for (const char * name : {"low_ram_safe", "wsl_compat"}) {
        ResolveRequest rq;
        rq.preset = name;
        rq.preset_dirs = {kShipped};
        rq.platform = PlatformInfo{Platform::linux_native, "test"};
        auto s = resolve_settings(rq);
        EXPECT_FALSE(s.capacities().pin_host_memory) << name;
        EXPECT_FALSE(s.capacities("transformer").pin_host_memory) << name;
        const auto & pv = s.at("capacities.pin_host_memory").provenance;
        EXPECT_EQ(pv.layer, SettingLayer::preset) << name;
        EXPECT_EQ(fs::path(pv.source).filename(), std::string(name) + ".toml");
        // The line of `pin_host_memory = false` in the shipped file, at the value's column.
        std::ifstream in(kShipped / (std::string(name) + ".toml"));
        int line = 0, found = 0;
        for (std::string l; std::getline(in, l);) {
            ++line;
            if (l.rfind("pin_host_memory", 0) == 0) found = line;
        }
        ASSERT_GT(found, 0) << name << ".toml does not set pin_host_memory";
        EXPECT_EQ(pv.line, found) << name;
        EXPECT_EQ(pv.column, 19) << name;  // after "pin_host_memory = "
        EXPECT_EQ(s.to_json()["values"]["capacities.pin_host_memory"]["value"], false) << name;
    }
    for (const char * name : {"one_shot_fast", "warm_process", "off"}) {
        ResolveRequest rq;
        rq.preset = name;
        rq.preset_dirs = {kShipped};
        rq.platform = PlatformInfo{Platform::linux_native, "test"};
        EXPECT_TRUE(resolve_settings(rq).capacities().pin_host_memory) << name;
    }

    // Environment and --set.
    auto rq = request("");
    rq.environment = {{"DDO_CAPACITIES_PIN_HOST_MEMORY", "off"}};
    auto e = resolve_settings(rq);
    EXPECT_FALSE(e.capacities().pin_host_memory);
    EXPECT_EQ(e.at("capacities.pin_host_memory").provenance.layer, SettingLayer::environment);
    rq.sets = {"capacities.pin_host_memory=true"};
    auto c = resolve_settings(rq);
    EXPECT_TRUE(c.capacities().pin_host_memory);
    EXPECT_EQ(c.at("capacities.pin_host_memory").provenance.layer, SettingLayer::command_line);
}

TEST_F(PresetTest, PinHostMemoryWrongTypeNamesFileLineCol) {
    auto p = write("bad.toml", "schema_version = 1\n[capacities]\npin_host_memory = 0\n");
    auto e = error_of(request(p.string()));
    EXPECT_EQ(fs::path(e.file()).filename(), "bad.toml");
    EXPECT_EQ(e.line(), 3);
    EXPECT_EQ(e.column(), 19);
    EXPECT_NE(std::string(e.what()).find("bad.toml:3:19"), std::string::npos) << e.what();
    EXPECT_NE(e.problem().find("expected boolean"), std::string::npos) << e.what();
    EXPECT_EQ(e.code(), ExitCode::usage);
    auto p2 = write("bad2.toml", "schema_version = 1\n[capacities]\npin_host_memory = \"no\"\n");
    auto e2 = error_of(request(p2.string()));
    EXPECT_EQ(e2.line(), 3);
    EXPECT_EQ(e2.column(), 19);
    // The environment spelling is checked too.
    auto rq = request("");
    rq.environment = {{"DDO_CAPACITIES_PIN_HOST_MEMORY", "maybe"}};
    EXPECT_EQ(error_of(rq).file(), "environment DDO_CAPACITIES_PIN_HOST_MEMORY");
}

TEST_F(PresetTest, ToJsonCarriesProvenance) {
    auto p = write("p.toml", "schema_version = 1\n[vae]\nstrategy = \"tiled\"\n");
    auto j = resolve_settings(request(p.string())).to_json();
    EXPECT_EQ(j["values"]["vae.strategy"]["value"], "tiled");
    EXPECT_EQ(j["values"]["vae.strategy"]["source"]["layer"], "preset");
    EXPECT_EQ(j["values"]["vae.strategy"]["source"]["line"], 3);
    EXPECT_EQ(j["values"]["vae.tile_size"]["source"]["layer"], "default");
    EXPECT_EQ(j["preset"]["requested"], p.string());
}

TEST(EditDistanceTest, Basics) {
    EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
    EXPECT_EQ(nearest("stagin_slots", {"staging_slots", "prefetch_depth"}), "staging_slots");
    EXPECT_EQ(nearest("zzzzzz", {"staging_slots"}), "");
}

TEST(PresetSchemaTest, EnvNames) {
    EXPECT_EQ(env_name_for("capacities.resident_budget_gb"), "DDO_CAPACITIES_RESIDENT_BUDGET_GB");
    EXPECT_EQ(env_name_for("components.transformer.route"), "DDO_TRANSFORMER_ROUTE");
}

}  // namespace
