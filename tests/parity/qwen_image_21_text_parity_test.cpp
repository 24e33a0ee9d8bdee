// qwen_image_21 text path against transformers/diffusers fixtures (tools/reference/qwen_image_21_text_fixtures.py):
// template tokens and drop index -> one decoder layer -> the whole tower (last layer before the final norm) -> the
// pipeline's prompt embeddings (drop) -> two prompts in one batch (left padding, masks) -> every engine route equal
// to the resident one. Tolerance (fp32): 1e-4 absolute on hidden states and embeddings.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "checkpoint.hpp"
#include "cpu_plan.hpp"
#include "ddo/error.hpp"
#include "parity/parity_support.hpp"
#include "prompt_encoder.hpp"

namespace qi = ddo::qwen_image_21;
namespace fs = std::filesystem;

namespace {

const fs::path kDir = QI21_TEXT_FIXTURE_DIR;
constexpr double kTol = 1e-4;

bool have_fixtures() { return fs::exists(kDir / "reference.json"); }

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, "qwen_image_21_text_fixtures"); }

qi::TensorFile fixtures() { return qi::TensorFile::open_file(kDir / "text_encoder.safetensors"); }

ddo::model::ComponentPlan plan(ddo::Route route, double resident_gb = 0) {
    return ddo::test::cpu_plan("text_encoder", route, ddo::test::linear_allocator(QI21_PLUGIN_DIR), resident_gb);
}

double max_abs(const at::Tensor & a, const at::Tensor & b) { return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>(); }

std::vector<int64_t> to_vec(const at::Tensor & t) {
    auto c = t.to(at::kLong).contiguous();
    return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

class Qi21TextParity : public ::testing::Test {
protected:
    void SetUp() override {
        if (!have_fixtures()) GTEST_SKIP() << kDir << "/reference.json missing: build target qwen_image_21_text_fixtures";
        const auto & r = reference();
        std::cout << "[ reference ] transformers " << r.at("transformers_version").get<std::string>() << ", diffusers "
                  << r.at("reference_version").get<std::string>() << " (torch " << r.at("torch_version").get<std::string>()
                  << ")\n";
    }
    qi::PromptEncoder open() { return qi::PromptEncoder::open(kDir / "checkpoint"); }
};

TEST_F(Qi21TextParity, TemplateTokensAndDropIndexAreThePipelines) {
    auto enc = open();
    EXPECT_EQ(enc.drop_index(), reference().at("drop_idx").get<int64_t>()) << "QwenImage21Pipeline._drop_idx";
    auto f = fixtures();
    for (const auto & [name, prompt] : reference().at("prompts").items()) {
        EXPECT_EQ(enc.template_ids(prompt.get<std::string>()), to_vec(f.read(name + ".ids")[0])) << name;
    }
}

TEST_F(Qi21TextParity, OneLayerWholeTowerAndDropMatchTransformers) {
    auto enc = open();
    auto f = fixtures();
    auto w = ddo::model::ComponentWeights::open(enc.weights_dir(), enc.groups(), plan(ddo::Route::resident), at::kFloat);
    ddo::text::Qwen3TextConfig one = enc.config();
    one.num_layers = 1;
    for (const auto & [name, prompt] : reference().at("prompts").items()) {
        const auto ids = f.read(name + ".ids");
        const auto mask = at::ones_like(ids);
        auto l0 = ddo::text::qwen3_last_hidden_before_norm(*w, one, ids, mask, at::kFloat, at::kCPU);
        auto last = ddo::text::qwen3_last_hidden_before_norm(*w, enc.config(), ids, mask, at::kFloat, at::kCPU);
        auto e = enc.encode(*w, {prompt.get<std::string>()}, at::kFloat, at::kCPU);
        const double d0 = max_abs(l0, f.read(name + ".layer0")), d1 = max_abs(last, f.read(name + ".last")),
                     d2 = max_abs(e.embeds, f.read(name + ".embeds"));
        EXPECT_LE(d0, kTol) << name << ": first decoder layer";
        EXPECT_LE(d1, kTol) << name << ": last layer before the final norm";
        EXPECT_LE(d2, kTol) << name << ": prompt embeddings after the template drop";
        EXPECT_FALSE(e.mask.has_value()) << "one prompt is never padded";
        std::cout << "[ text      ] " << name << ": " << ids.size(1) << " tokens; max |diff| layer0 " << d0 << ", last "
                  << d1 << ", embeds " << d2 << "\n";
    }
    EXPECT_EQ(w->finish(), 0u);
}

TEST_F(Qi21TextParity, TwoPromptsLeftPaddedGiveThePipelinesEmbeddingsAndMask) {
    auto enc = open();
    auto f = fixtures();
    auto w = ddo::model::ComponentWeights::open(enc.weights_dir(), enc.groups(), plan(ddo::Route::resident), at::kFloat);
    std::vector<std::string> prompts;
    for (const auto & k : reference().at("batch_prompts")) prompts.push_back(reference().at("prompts").at(k.get<std::string>()));
    auto e = enc.encode(*w, prompts, at::kFloat, at::kCPU);
    const auto want = f.read("batch.embeds"), want_mask = f.read("batch.mask").to(at::kBool);
    ASSERT_EQ(e.embeds.sizes(), want.sizes());
    ASSERT_TRUE(e.mask.has_value());
    EXPECT_TRUE(at::equal(*e.mask, want_mask));
    const double d = max_abs(e.embeds, want);
    EXPECT_LE(d, kTol);
    std::cout << "[ batch     ] 2 prompts, shape [" << want.size(0) << ", " << want.size(1) << ", " << want.size(2)
              << "], mask equal, max |diff| " << d << "\n";
}

TEST_F(Qi21TextParity, EveryRouteEqualsResident) {
    auto enc = open();
    const std::string prompt = reference().at("prompts").at("long");
    auto ref_w = ddo::model::ComponentWeights::open(enc.weights_dir(), enc.groups(), plan(ddo::Route::resident), at::kFloat);
    const auto want = enc.encode(*ref_w, {prompt}, at::kFloat, at::kCPU).embeds;
    ref_w->finish();
    for (auto route : {ddo::Route::component, ddo::Route::dynamic, ddo::Route::disk, ddo::Route::group_block,
                       ddo::Route::group_leaf}) {
        auto w = ddo::model::ComponentWeights::open(enc.weights_dir(), enc.groups(), plan(route, 1e-6), at::kFloat);
        const auto got = enc.encode(*w, {prompt}, at::kFloat, at::kCPU).embeds;
        EXPECT_EQ(w->finish(), 0u) << w->route();
        EXPECT_TRUE(at::equal(want, got)) << w->route() << " differs from resident";
        if (route == ddo::Route::component)  // read in place from the file mapping on the CPU (Note [Mapped residents])
            EXPECT_GT(w->report().at("engine").at("counters").at("mapped_bytes").get<uint64_t>(), 0u);
        else
            EXPECT_GT(w->bytes_streamed(), 0u) << w->route();
        std::cout << "[ routes    ] text_encoder " << w->route() << " == resident bitwise; bytes moved "
                  << w->bytes_streamed() << "\n";
    }
}

// Vision blocks are placed by ddo, one per condition image (--image): a prompt holding its own is refused.
TEST_F(Qi21TextParity, AVisionTokenInThePromptIsRefused) {
    auto enc = open();
    try {
        (void)enc.template_ids("edit <|vision_start|><|image_pad|><|vision_end|> this");
        FAIL() << "a prompt with an image slot was tokenized";
    } catch (const ddo::UsageError & e) {
        EXPECT_NE(std::string(e.what()).find("--image"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("remove the token"), std::string::npos) << e.what();
    }
}

TEST_F(Qi21TextParity, AMissingTextEncoderIsRefusedNamingTheFile) {
    const fs::path dir = fs::temp_directory_path() / ("qi21_no_te_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    try {
        (void)qi::PromptEncoder::open(dir);
        FAIL() << "opened a checkpoint without text_encoder/";
    } catch (const ddo::UsageError & e) {
        EXPECT_NE(std::string(e.what()).find("text_encoder/config.json"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("--prompt-embeds"), std::string::npos) << e.what();
    }
    fs::remove_all(dir);
}

}  // namespace
