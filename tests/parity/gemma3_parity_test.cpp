// ddo_gemma3 (the Gemma-3 text tower, all hidden states) against transformers' Gemma3ForConditionalGeneration,
// fixtures of tools/reference/gemma3_fixtures.py: every hidden state of each case (an unpadded prompt, a left-padded
// batch where the sliding window cuts the context, a truncated prompt), the pipeline's ids from ddo's tokenizer,
// the plain Gemma3TextConfig equal to the nested one, every engine route equal to the resident one, and checkpoint
// and config errors naming tensor / key and file. Tolerance (fp32): 1e-4 absolute on every hidden state.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <unistd.h>

#include <fstream>
#include <functional>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cpu_plan.hpp"
#include "ddo/error.hpp"
#include "ddo/model/tensor_file.hpp"
#include "gemma3_text_model.hpp"
#include "parity/parity_support.hpp"
#include "sentencepiece_tokenizer.hpp"

namespace fs = std::filesystem;
namespace text = ddo::text;
using ddo::test::max_abs;
using ddo::test::message_of;

namespace {

const fs::path kDir = GEMMA3_FIXTURE_DIR;
const fs::path kTextEncoder = kDir / "checkpoint" / "text_encoder";
constexpr double kTol = 1e-4;

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, "gemma3_fixtures"); }

ddo::model::ComponentPlan plan(ddo::Route route, double resident_gb = 0) {
    return ddo::test::cpu_plan("text_encoder", route, ddo::test::linear_allocator(GEMMA3_PLUGIN_DIR), resident_gb);
}

struct Tower {
    text::Gemma3TextConfig config = text::Gemma3TextConfig::from_file(kTextEncoder / "config.json");
    std::vector<ddo::model::GroupSpec> groups;
    Tower() {
        const auto f = ddo::model::TensorFile::open_component(kTextEncoder);
        groups = text::gemma3_groups(config, f.names());
        text::gemma3_check_weights(f, config);
    }
    std::unique_ptr<ddo::model::ComponentWeights> weights(ddo::Route route = ddo::Route::resident, double gb = 0) const {
        return ddo::model::ComponentWeights::open(kTextEncoder, groups, plan(route, gb), at::kFloat);
    }
};

class Gemma3Parity : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(kDir / "reference.json")) GTEST_SKIP() << kDir << "/reference.json missing: build target gemma3_fixtures";
        const auto & r = reference();
        std::cout << "[ reference ] transformers " << r.at("reference_version").get<std::string>() << " (torch "
                  << r.at("torch_version").get<std::string>() << ", seed " << r.at("seed").get<int>() << ")\n";
    }
};

}  // namespace

TEST_F(Gemma3Parity, EveryHiddenStateMatchesTransformers) {
    Tower t;
    EXPECT_EQ(t.config.weight_prefix, "language_model.model.");
    EXPECT_EQ(t.groups.size(), std::size_t(t.config.num_layers + 2));
    auto w = t.weights();
    const auto f = ddo::model::TensorFile::open_file(kDir / "text_encoder.safetensors");
    const auto n = reference().at("num_hidden_states").get<std::size_t>();
    for (const auto & c : reference().at("model_cases")) {
        const std::string name = c.at("name");
        const auto ids = f.read(name + ".ids"), mask = f.read(name + ".mask");
        const auto states = text::gemma3_hidden_states(*w, t.config, ids, mask, at::kFloat, at::kCPU);
        ASSERT_EQ(states.size(), n) << name;
        double worst = 0;
        std::size_t worst_at = 0;
        for (std::size_t i = 0; i < n; ++i) {
            const double e = max_abs(states[i], f.read(name + ".hidden." + std::to_string(i)));
            EXPECT_LE(e, kTol) << name << " hidden state " << i;
            if (e >= worst) worst = e, worst_at = i;
        }
        std::cout << "[ parity    ] " << name << " [" << ids.size(0) << ", " << ids.size(1) << "], "
                  << (mask.all().item<bool>() ? "no padding" : "left padded") << ": " << n
                  << " hidden states, max abs error " << worst << " (state " << worst_at << ", tolerance " << kTol
                  << ")\n";
    }
    EXPECT_EQ(w->finish(), 0u);
}

TEST_F(Gemma3Parity, DdosTokenizerGivesTheIdsTheTowerWasRunOn) {
    const auto tok = text::SentencePieceTokenizer::from_dir(kDir / "checkpoint" / "tokenizer");
    const auto f = ddo::model::TensorFile::open_file(kDir / "text_encoder.safetensors");
    for (const auto & c : reference().at("model_cases")) {
        const std::string name = c.at("name");
        std::vector<std::string> texts;
        for (const auto & p : c.at("prompts")) texts.push_back(p.get<std::string>());  // already stripped
        const auto want = f.read(name + ".ids"), want_mask = f.read(name + ".mask");
        const auto p = tok.encode_left_padded(texts, want.size(1));
        EXPECT_TRUE(at::equal(at::tensor(p.ids).view({p.batch, p.length}), want)) << name;
        EXPECT_TRUE(at::equal(at::tensor(p.mask).view({p.batch, p.length}), want_mask)) << name;
    }
}

TEST_F(Gemma3Parity, PlainTextConfigEqualsTheNestedOne) {
    const auto a = text::Gemma3TextConfig::from_file(kTextEncoder / "config.json");
    const auto b = text::Gemma3TextConfig::from_file(kDir / "text_config_only" / "config.json");
    EXPECT_EQ(a.hidden_size, b.hidden_size);
    EXPECT_EQ(a.num_layers, 4);
    EXPECT_EQ(a.sliding, b.sliding);
    EXPECT_EQ(a.sliding, (std::vector<bool>{true, true, false, true}));
    EXPECT_EQ(a.full_rope.linear_factor, 8.0);
    EXPECT_EQ(b.full_rope.theta, 1e6);
    EXPECT_EQ(a.sliding_rope.theta, b.sliding_rope.theta);
    EXPECT_EQ(a.query_pre_attn_scalar, 16.0);
    EXPECT_EQ(a.sliding_window, 4);
}

TEST_F(Gemma3Parity, EveryRouteEqualsResident) {
    Tower t;
    const auto f = ddo::model::TensorFile::open_file(kDir / "text_encoder.safetensors");
    const auto ids = f.read("batch.ids"), mask = f.read("batch.mask");
    auto ref = t.weights();
    const auto want = text::gemma3_hidden_states(*ref, t.config, ids, mask, at::kFloat, at::kCPU);
    ref->finish();
    for (auto route : {ddo::Route::component, ddo::Route::dynamic, ddo::Route::disk, ddo::Route::group_block,
                       ddo::Route::group_leaf}) {
        auto w = t.weights(route, 1e-6);
        const auto got = text::gemma3_hidden_states(*w, t.config, ids, mask, at::kFloat, at::kCPU);
        EXPECT_EQ(w->finish(), 0u) << w->route();
        ASSERT_EQ(got.size(), want.size());
        for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(at::equal(got[i], want[i])) << w->route() << " state " << i;
        std::cout << "[ routes    ] text_encoder " << w->route() << " == resident bitwise; bytes moved "
                  << w->bytes_streamed() << "\n";
    }
}

TEST_F(Gemma3Parity, CheckpointErrorsNameTensorAndFile) {
    const std::string victim = reference().at("broken_tensor");
    for (const char * dir : {"broken_missing", "broken_shape"}) {
        auto c = text::Gemma3TextConfig::from_file(kDir / dir / "config.json");
        const auto f = ddo::model::TensorFile::open_component(kDir / dir);
        (void)text::gemma3_groups(c, f.names());
        const auto m = message_of<ddo::RuntimeError>([&] { text::gemma3_check_weights(f, c); });
        EXPECT_NE(m.find(victim), std::string::npos) << dir << ": " << m;
        EXPECT_NE(m.find("model.safetensors"), std::string::npos) << dir << ": " << m;
        std::cout << "[ errors    ] " << dir << ": " << m << "\n";
    }
    const auto m = message_of<ddo::RuntimeError>([] {
        text::Gemma3TextConfig c;
        (void)text::gemma3_groups(c, {"vision_tower.x.weight"});
    });
    EXPECT_NE(m.find("embed_tokens.weight"), std::string::npos) << m;
}

TEST_F(Gemma3Parity, UnimplementedConfigsAreRefusedNamingFileAndKey) {
    const fs::path dir = fs::temp_directory_path() / ("ddo_gemma3_cfg_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto base = nlohmann::json::parse(std::ifstream(kTextEncoder / "config.json"));
    const std::vector<std::pair<std::string, std::function<void(nlohmann::json &)>>> cases = {
        {"text_config.hidden_activation", [](nlohmann::json & j) { j["text_config"]["hidden_activation"] = "silu"; }},
        {"text_config.rope_parameters.full_attention.rope_type",
         [](nlohmann::json & j) { j["text_config"]["rope_parameters"]["full_attention"]["rope_type"] = "yarn"; }},
        {"text_config.attn_logit_softcapping", [](nlohmann::json & j) { j["text_config"]["attn_logit_softcapping"] = 50.0; }},
        {"text_config.layer_types", [](nlohmann::json & j) { j["text_config"]["layer_types"].erase(0); }},
    };
    for (const auto & [key, change] : cases) {
        auto j = base;
        change(j);
        std::ofstream(dir / "config.json") << j.dump();
        const auto m = message_of<ddo::UsageError>([&] { (void)text::Gemma3TextConfig::from_file(dir / "config.json"); });
        EXPECT_NE(m.find((dir / "config.json").string() + ": " + key), std::string::npos) << m;
    }
    fs::remove_all(dir);
}

TEST_F(Gemma3Parity, TheSlidingWindowTheLinearRopeAndTheMaskAreExercised) {
    // The fixtures would not catch a tower that ignores the window, the RoPE scaling or the padding: each of these
    // changes moves the last hidden state of the padded batch far past the tolerance.
    Tower t;
    auto w = t.weights();
    const auto f = ddo::model::TensorFile::open_file(kDir / "text_encoder.safetensors");
    const auto ids = f.read("batch.ids"), mask = f.read("batch.mask");
    const auto want = f.read("batch.hidden." + std::to_string(t.config.num_layers));
    const auto valid = mask.to(at::kBool).unsqueeze(-1);  // compare real tokens only
    const auto error_with = [&](const text::Gemma3TextConfig & c, const at::Tensor & m) {
        const auto got = text::gemma3_hidden_states(*w, c, ids, m, at::kFloat, at::kCPU).back();
        return max_abs(got.masked_fill(~valid, 0), want.masked_fill(~valid, 0));
    };
    auto no_window = t.config;
    no_window.sliding_window = 1000;
    auto no_scaling = t.config;
    no_scaling.full_rope.linear_factor = 1;
    const double e_window = error_with(no_window, mask), e_rope = error_with(no_scaling, mask),
                 e_mask = error_with(t.config, at::ones_like(mask));
    EXPECT_GT(e_window, 100 * kTol);
    EXPECT_GT(e_rope, 100 * kTol);
    EXPECT_GT(e_mask, 100 * kTol);
    std::cout << "[ controls  ] without the window " << e_window << ", without linear RoPE scaling " << e_rope
              << ", without the padding mask " << e_mask << "\n";
    EXPECT_EQ(w->finish(), 0u);
}
