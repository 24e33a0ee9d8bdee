// qwen_image_21 with condition images, below the whole image (tools/reference/qwen_image_21_reference_fixtures.py):
// for every pipeline run of the fixtures, the references read from their PNG files and prepared as
// QwenImage21Pipeline.__call__ does, the vision tower on them, then the prompt embeddings and image_pad_mask of
// encode_prompt(image=...) (the ti2i template, pad expansion, drop), and the normalised, packed reference latents of
// prepare_latents. Tolerance (fp32): 1e-4 absolute on embeddings and latents; masks equal.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "checkpoint.hpp"
#include "cpu_plan.hpp"
#include "ddo/media/image_reader.hpp"
#include "parity/parity_support.hpp"
#include "pipeline.hpp"
#include "prompt_encoder.hpp"
#include "references.hpp"
#include "vae_encoder.hpp"

namespace qi = ddo::qwen_image_21;
namespace fs = std::filesystem;

namespace {

const fs::path kDir = QI21_REF_FIXTURE_DIR;
constexpr double kTol = 1e-4;

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, "qwen_image_21_reference_fixtures"); }

double max_abs(const at::Tensor & a, const at::Tensor & b) {
    return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

ddo::model::ComponentPlan plan(const std::string & component) {
    return ddo::test::cpu_plan(component, ddo::Route::resident, ddo::test::linear_allocator(QI21_PLUGIN_DIR), 0);
}

std::vector<qi::Reference> references_of(const nlohmann::json & names) {
    const auto processor_file = kDir / "checkpoint" / "processor" / "preprocessor_config.json";
    std::vector<ddo::model::ConditionImage> images;
    for (const auto & n : names) {
        const auto f = kDir / "refs" / (n.get<std::string>() + ".png");
        images.push_back({f, 0, ddo::media::read_image(f)});
    }
    return qi::prepare_references(images, reference().at("output_resolution").get<int64_t>(),
                                  ddo::text::Qwen2VlImageProcessorConfig::from_file(processor_file), processor_file);
}

class Qi21RefParity : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(kDir / "reference.json"))
            GTEST_SKIP() << kDir << "/reference.json missing: build target qwen_image_21_reference_fixtures";
    }
};

}  // namespace

TEST_F(Qi21RefParity, PromptEmbeddingsAndSlotMaskWithReferencesMatchEncodePrompt) {
    auto enc = qi::PromptEncoder::open(kDir / "checkpoint");
    auto vision_config = ddo::text::Qwen3VisionConfig::from_file(enc.weights_dir() / "config.json");
    auto vision = ddo::model::ComponentWeights::open(enc.weights_dir(), enc.vision_groups(vision_config),
                                                     plan("vision_tower"), at::kFloat);
    auto text = ddo::model::ComponentWeights::open(enc.weights_dir(), enc.groups(), plan("text_encoder"), at::kFloat);
    auto f = qi::TensorFile::open_file(kDir / "pipeline_refs.safetensors");
    for (const auto & [name, run] : reference().at("runs").items()) {
        const auto refs = references_of(run.at("images"));
        const auto batch = qi::vision_batch(refs);
        qi::PromptImages images;
        images.grid_thw = batch.grid_thw;
        images.tokens = batch.tokens;
        images.spatial_merge_size = vision_config.spatial_merge_size;
        images.features = ddo::text::qwen3_vision_forward(*vision, vision_config, batch.pixel_values, images.grid_thw,
                                                          at::kFloat, at::kCPU);
        const auto e = enc.encode(*text, {run.at("prompt").get<std::string>()}, at::kFloat, at::kCPU, {}, &images);
        const auto want = f.read(name + ".prompt_embeds");
        ASSERT_EQ(e.embeds.sizes(), want.sizes()) << name << ": the template's expanded length";
        const double d = max_abs(e.embeds, want);
        EXPECT_LE(d, kTol) << name << ": prompt embeddings with references";
        ASSERT_TRUE(e.image_pad_mask.has_value()) << name;
        EXPECT_TRUE(at::equal(e.image_pad_mask->to(at::kByte), f.read(name + ".image_pad_mask").to(at::kByte))) << name;
        std::cout << "[ embeds    ] " << name << " (" << refs.size() << " reference(s), " << want.size(1)
                  << " tokens): max abs " << d << " (tolerance " << kTol << "), image_pad_mask equal\n";
    }
}

TEST_F(Qi21RefParity, ReferenceLatentsMatchPrepareLatents) {
    auto m = qi::ModelFiles::open(kDir / "checkpoint");
    qi::VaeEncoder vae(m.vae, m.vae_config, at::kFloat, at::kCPU, qi::VaeStrategy::resident);
    auto f = qi::TensorFile::open_file(kDir / "pipeline_refs.safetensors");
    for (const auto & [name, run] : reference().at("runs").items()) {
        std::vector<at::Tensor> packed;
        for (const auto & r : references_of(run.at("images"))) {
            const auto z = vae.encode_normalized(r.vae_pixels);
            packed.push_back(z.permute({0, 2, 3, 4, 1}).reshape({1, z.size(3) * z.size(4), z.size(1)}));
        }
        const auto got = at::cat(packed, 1);
        const auto want = f.read(name + ".image_latents");
        ASSERT_EQ(got.sizes(), want.sizes()) << name;
        const double d = max_abs(got, want);
        EXPECT_LE(d, kTol) << name << ": reference latents";
        std::cout << "[ latents   ] " << name << ": " << want.size(1) << " reference tokens, max abs " << d << "\n";
    }
}

TEST_F(Qi21RefParity, CalculateDimensionsRoundsHalfToEvenAsPython) {
    // calculate_dimensions(96^2, 1.5): sqrt(13824) = 117.6 -> 128; 78.4 / 32 = 2.45 -> 64. 1024^2 at 16:9 -> 1376x768.
    EXPECT_EQ(qi::calculate_dimensions(96.0 * 96.0, 1.5), (std::pair<int64_t, int64_t>{128, 64}));
    EXPECT_EQ(qi::calculate_dimensions(1024.0 * 1024.0, 16.0 / 9.0), (std::pair<int64_t, int64_t>{1376, 768}));
    // 80 / 32 = 2.5: Python's round gives 2 (half to even), not 3.
    EXPECT_EQ(qi::calculate_dimensions(80.0 * 80.0, 1.0), (std::pair<int64_t, int64_t>{64, 64}));
}
