#include "reference_stages.hpp"

#include <ATen/ATen.h>

#include <optional>

#include "ddo/error.hpp"
#include "vae_choice.hpp"
#include "vae_encoder.hpp"

namespace ddo::qwen_image_21 {
namespace {

namespace fs = std::filesystem;

fs::path processor_file(const fs::path & model_dir) {
    for (const char * sub : {"processor", "image_processor"}) {
        const auto f = model_dir / sub / "preprocessor_config.json";
        if (fs::is_regular_file(f)) return f;
    }
    throw UsageError((model_dir / "processor" / "preprocessor_config.json").string() +
                     " is missing: condition images (--image) go through the checkpoint's Qwen3-VL image processor; "
                     "save the pipeline with its processor (QwenImage21Pipeline.save_pretrained writes processor/)");
}

}  // namespace

References resolve_references(model::ModelRun & run, model::Workload & w, bool prompt_from_text, bool encode_only) {
    References refs;
    if (w.images.empty()) return refs;
    run.refuse_if_set("workload.strength", "Qwen-Image 2.1 conditions on reference images (QwenImage21Pipeline's "
                      "image=); it has no strength img2img");
    if (w.images.size() > kMaxReferences)
        throw UsageError("workload.images: " + std::to_string(w.images.size()) + " images; Qwen-Image 2.1 takes up to " +
                         std::to_string(kMaxReferences) + " reference images (the model card's limit); give fewer");
    if (!prompt_from_text)
        throw UsageError("--image with --prompt-embeds: the text encoder must see the condition images (their vision "
                         "tokens are part of the prompt's embeddings); give the prompt as text (-p)");
    if (encode_only)
        throw UsageError("ddo-host encode --image: embeddings with condition images are not written to a file yet; "
                         "run the generation with -p and --image");
    refs.output_resolution = run.option<std::int64_t>("output_resolution", 1024);
    if (refs.output_resolution < 32 || refs.output_resolution > 4096)
        throw UsageError("plugin.qwen_image_21.output_resolution = " + std::to_string(refs.output_resolution) +
                         ": out of range [32, 4096] (each reference is resized to about output_resolution^2 pixels; "
                         "1024 is the pipeline's default)");
    refs.processor_file = processor_file(run.require_model_dir());
    refs.processor = text::Qwen2VlImageProcessorConfig::from_file(refs.processor_file);
    const auto images = run.condition_images();
    for (const auto & im : images)
        if (im.frame != 0)
            throw UsageError("--image " + im.path.string() + "@" + std::to_string(im.frame) + ": Qwen-Image 2.1 makes "
                             "still images; a reference has no frame (drop @" + std::to_string(im.frame) + ")");
    refs.items = prepare_references(images, refs.output_resolution, refs.processor, refs.processor_file);
    for (std::size_t i = 0; i < refs.items.size(); ++i)
        run.record_image_preprocess(i, preprocess_record(refs.items[i], refs.output_resolution));
    // QwenImage21Pipeline: height = height or the last reference's calculated height (width likewise).
    const auto & last = refs.items.back();
    if (!w.width_set) w.width = last.width;
    if (!w.height_set) w.height = last.height;
    return refs;
}

PromptImages encode_vision(model::ModelRun & run, const model::ComponentPlan & plan, const PromptEncoder & encoder,
                           const References & refs, at::ScalarType dtype, at::Device device) {
    run.begin_phase("encode_vision");
    auto config = text::Qwen3VisionConfig::from_file(encoder.weights_dir() / "config.json");
    auto groups = encoder.vision_groups(config);
    // Every tensor of the tower checked from the header before any is read (exit 4 naming tensor and file).
    text::qwen3_vision_check_weights(model::TensorFile::open_component(encoder.weights()), config);
    auto weights = run.open_weights(plan, encoder.weights(), std::move(groups), dtype);
    auto batch = vision_batch(refs.items);
    PromptImages out;
    out.spatial_merge_size = config.spatial_merge_size;
    out.grid_thw = batch.grid_thw;
    out.tokens = batch.tokens;
    text::VisionTowerCallbacks cb;
    cb.check_interrupted = [&](int block) { run.check_interrupted("at vision block " + std::to_string(block)); };
    cb.on_block = [&](int block, int total) { run.step(block, total); };
    if (!run.dry_run()) out.features = text::qwen3_vision_forward(*weights, config, batch.pixel_values, out.grid_thw,
                                                                  dtype, device, cb);
    run.unload(std::move(weights));
    return out;
}

ReferenceLatents encode_reference_latents(model::ModelRun & run, const ModelFiles & m, const model::ComponentPlan & vae,
                                          const References & refs, at::ScalarType dtype, at::Device device) {
    run.begin_phase("encode_image");
    ReferenceLatents out;
    std::vector<at::Tensor> packed;
    nlohmann::json executed = nlohmann::json::array();
    uint64_t weight_bytes = 0, uploads = 0;
    // One encoder (its weights read once) serves every reference its size gives the same strategy (the tiling comes
    // from the plan); a reference that needs another strategy gets its own.
    std::optional<VaeEncoder> encoder_holder;
    std::optional<VaeStrategy> built_for;
    for (std::size_t i = 0; i < refs.items.size(); ++i) {
        const auto & r = refs.items[i];
        run.check_interrupted("before encoding reference " + std::to_string(i));
        const auto choice = choose_vae_strategy(vae, m.vae, m.vae_config, 1, r.width, r.height, dtype);
        if (built_for != choice.strategy) {
            if (encoder_holder) uploads += encoder_holder->uploads();
            encoder_holder.emplace(m.vae, m.vae_config, dtype, device, choice.strategy, choice.tiling);
            built_for = choice.strategy;
        }
        auto & encoder = *encoder_holder;
        // _encode_vae_image: the posterior's mode, (z - latents_mean) / latents_std; _pack_latents: [1, h*w, C].
        const auto z = encoder.encode_normalized(r.vae_pixels.to(device, dtype));
        const int64_t C = z.size(1), h = z.size(3), w = z.size(4);
        packed.push_back(z.permute({0, 2, 3, 4, 1}).reshape({1, h * w, C}));
        out.shapes.push_back({1, h, w});
        // A tiled encode of an image that fits one tile runs in one piece, as the reference's does.
        const char * ran = encoder.last_encode_tiled()                ? "tiled"
                           : choice.strategy == VaeStrategy::tiled ? "resident"
                                                                    : vae_strategy_name(choice.strategy);
        executed.push_back({{"image", i}, {"strategy", ran}, {"requested", choice.requested}, {"reason", choice.reason}});
        weight_bytes = encoder.weight_bytes();
        run.step(int(i + 1), int(refs.items.size()));
    }
    if (encoder_holder) uploads += encoder_holder->uploads();
    out.packed = at::cat(packed, 1);
    run.record_counters("vae_encoder", {{"images", executed}, {"weight_bytes", weight_bytes}, {"leaf_uploads", uploads},
                                        {"latent_tokens", out.packed.size(1)}});
    return out;
}

nlohmann::json references_json(const References & refs) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto & r : refs.items)
        a.push_back({{"file", r.path.string()}, {"width", r.width}, {"height", r.height},
                     {"vision_tokens", r.vision_tokens}, {"latent_tokens", (r.width / 16) * (r.height / 16)}});
    return a;
}

}  // namespace ddo::qwen_image_21
