// The ltx2_image run (reference: the composed image pipeline of tools/reference/ltx2_image_fixtures.py, following
// DEVAIEXP/ltx2-image-diffusers modular_blocks_ltx2_image.py): the prompt (Gemma-3 on the engine, as
// LTX2ImageTextEncoderStep: LTX2Pipeline's _get_gemma_prompt_embeds, max_sequence_length 1024, negative prompt ""
// under guidance) or prompt embeddings -> image connectors -> denoise on the audio-less DiT -> LTX-2.3 video VAE
// (frame 0) -> PNG; `ddo-host encode` stops after the text encoder and writes the embeddings.
#include "plugin_run.hpp"

#include <ATen/ATen.h>

#include "ddo/error.hpp"
#include "image_connectors.hpp"
#include "image_pipeline.hpp"
#include "image_transformer.hpp"
#include "prompt_encoder.hpp"
#include "video_denoise.hpp"
#include "video_vae_choice.hpp"
#include "video_vae_decoder.hpp"
#include "video_vae_tiling.hpp"
#include "run_stages.hpp"
#include "weights.hpp"

namespace ddo::ltx2 {
namespace {

constexpr const char * kPlugin = "ltx2_image";

// The modular block's defaults (544 x 960) and the distilled runner's 8 steps, guidance 1.
constexpr model::WorkloadDefaults kDefaults{.width = 960, .height = 544, .steps = 8, .seed = 0};



}  // namespace

void run_ltx2_image(model::ModelRun & run) {
    const auto w = run.workload(kDefaults);
    run.require_model_dir();
    run.check_class("transformer/config.json", {"LTX2ImageTransformer2DModel"});
    run.check_class("connectors/config.json", {"LTX2ImageTextConnectors"});
    run.check_class("vae/config.json", {"AutoencoderKLLTX2Video"});
    run.refuse_if_set("workload.frames", "ltx2_image makes one image (one latent frame); use ltx2_video for clips");
    run.refuse_if_set("workload.fps", "ltx2_image makes one image (its time coordinates are one frame at 24 fps); "
                                      "use ltx2_video for clips");
    // Where the prompt comes from: text (the checkpoint's Gemma-3 encodes it) or a --prompt-embeds file.
    const bool from_text = run.prompt_from_text(w);
    const bool encode_only = run.encode_only();
    if (encode_only)
        for (const char * k : {"workload.width", "workload.height", "workload.steps", "workload.sigmas"})
            run.refuse_if_set(k, "ddo-host encode only encodes the prompt; give it to the run that uses the embeddings");
    // LTX2ImageTextEncoderStep's max_sequence_length default.
    const int64_t max_sequence_length = run.option<int64_t>("max_sequence_length", 1024);
    if (max_sequence_length < 1)
        throw UsageError("plugin.ltx2_image.max_sequence_length must be >= 1 (the image pipeline's default is 1024)");
    if (w.num_images != 1)
        throw UsageError(std::string(kPlugin) + ": workload.num_images = " + std::to_string(w.num_images) +
                         ": one image per run is implemented; run again with another seed");
    if (!from_text && run.prompt_embeds().empty() && !run.dry_run())
        throw UsageError(std::string(kPlugin) + ": no prompt: give -p/--prompt TEXT (the checkpoint's Gemma-3 text "
                         "encoder encodes it) or --prompt-embeds FILE (the stacked Gemma-3 hidden states; ddo-host "
                         "encode writes one)");
    if (!run.latents_file().empty())
        throw UsageError(std::string(kPlugin) + ": --latents is not implemented; the noise is drawn from workload.seed");

    if (from_text) run.check_class("text_encoder/config.json", {"Gemma3ForConditionalGeneration"});

    run.begin_phase("load");
    std::vector<std::string> components{"transformer", "connectors", "vae", "scheduler"};
    if (from_text) components.insert(components.begin(), {"text_encoder", "tokenizer"});
    run.record_checkpoint(components);
    auto m = ImageModel::open(run.model_dir());
    std::optional<Ltx2PromptEncoder> encoder;
    if (from_text) encoder = open_prompt_encoder(run, m.connectors_config);
    const auto & tc = m.transformer_config;
    uint64_t block_bytes = 0;
    for (const auto & [name, shape] : image_block_specs(tc, 0)) block_bytes += m.transformer.nbytes_of(name);
    run.add_checkpoint_facts({{"transformer_blocks", tc.num_layers}, {"block_payload_bytes", block_bytes}});

    // Sizes: multiples of the VAE's spatial compression (the modular block refuses others; ddo floors and says so).
    const int64_t s = m.vae_config.spatial_compression_ratio;
    const int64_t width = w.width / s * s, height = w.height / s * s;
    if (width < s || height < s)
        throw UsageError(std::string(kPlugin) + ": width and height must be at least " + std::to_string(s) +
                         " (the VAE's spatial compression)");
    for (auto [key, req, eff] : {std::tuple{"workload.width", w.width, width}, std::tuple{"workload.height", w.height, height}})
        if (req != eff)
            run.adjust(key, req, eff, "LTX-2 image sizes are multiples of the VAE's spatial compression " + std::to_string(s));
    const auto geo = image_geometry(m.vae_config, height, width);

    ImageGuidance g;
    g.cfg = w.guidance_scale.value_or(1.0);
    g.rescale = run.option<double>("guidance_rescale", 0.7);
    g.pag = run.option<double>("pag_scale", 0.0);
    const bool pag_layers_set = !run.option<nlohmann::json>("pag_applied_layers", nullptr).is_null();
    // The denoise step's default: [28] when the transformer has more than 28 blocks, else [num_blocks // 2].
    g.pag_blocks = run.option<std::vector<int64_t>>("pag_applied_layers",
                                                    {tc.num_layers > 28 ? int64_t(28) : tc.num_layers / 2});
    for (int64_t b : g.pag_blocks)
        if (b < 0 || b >= tc.num_layers)
            throw UsageError("plugin.ltx2_image.pag_applied_layers: block " + std::to_string(b) + " does not exist (the "
                             "transformer has " + std::to_string(tc.num_layers) + " blocks, 0.." +
                             std::to_string(tc.num_layers - 1) + ")" + (pag_layers_set ? "" : " (default)"));

    PromptEmbeds embeds;
    if (!run.prompt_embeds().empty()) {
        run.record_input("prompt_embeds", run.prompt_embeds());
        embeds = load_prompt_embeds(run.prompt_embeds(), m.connectors_config);
        if (g.cfg > 1.0 && !embeds.neg_embeds) {
            // LTX2ImageTextEncoderStep would encode negative_prompt ("") here; a run from embeddings does not load
            // the text encoder, so there is no unconditional branch to guide against.
            run.adjust("workload.guidance_scale", g.cfg, 1.0,
                       "the prompt embeddings carry no negative_prompt_embeds (a run from --prompt-embeds does not load "
                       "the text encoder): classifier-free guidance is off; put negative_prompt_embeds in the file "
                       "(ddo-host encode -n '' writes them) or give -p to guide");
            g.cfg = 1.0;
        }
    }
    if (from_text && g.cfg <= 1.0 && w.negative_prompt)
        run.adjust("workload.negative_prompt", *w.negative_prompt, "unused",
                   "guidance_scale <= 1: no classifier-free guidance, as in LTX2ImageTextEncoderStep");

    std::vector<float> sigmas = w.sigmas ? model::sigmas_from(*w.sigmas) : model::default_sigmas(w.steps);
    if (w.sigmas && w.steps_set && w.steps != int(w.sigmas->size()))
        run.adjust("workload.steps", w.steps, int(w.sigmas->size()),
                   "workload.sigmas sets the grid; its length is the number of steps");
    // mu as the reference reads it from scheduler_config.json (.get(key, LTX default)); `ddo-host encode` samples
    // nothing and needs no schedule.
    const auto schedule = encode_only ? model::FlowMatchSchedule{}
                                      : ltx2_schedule(m.scheduler_config, m.scheduler_json, sigmas, geo.tokens());
    const double mu = ltx2_mu(m.scheduler_json, geo.tokens());

    if (encode_only) run.plan_tensor_file();
    else if (from_text || !run.prompt_embeds().empty()) run.plan_images(1);
    const auto conn_plan = run.plan("connectors");
    const auto dit_plan = run.plan("transformer");
    const auto vae_plan = run.plan("vae");
    const auto device = dit_plan.placement.device();
    const auto vae_choice = choose_video_vae_strategy(vae_plan, m.vae, m.vae_config, 1, 1, width, height, w.dtype,
                                                      vae_plan.vae_tiles.temporal_frames);
    nlohmann::json sig = nlohmann::json::array();
    for (float v : schedule.sigmas) sig.push_back(double(v));
    const int passes = 1 + int(g.cfg > 1.0) + int(g.pag > 0.0);
    run.record_workload({{"model", kPlugin}, {"width", width}, {"height", height},
                         {"latent", {{"height", geo.latent_height}, {"width", geo.latent_width}, {"tokens", geo.tokens()}}},
                         {"steps", int(sigmas.size())}, {"sigmas", sig}, {"mu", mu},
                         {"sigmas_source", w.sigmas ? "workload.sigmas" : "linspace(1, 1/steps, steps)"},
                         {"seed", w.seed},
                         {"guidance", {{"guidance_scale", g.cfg}, {"guidance_rescale", g.rescale}, {"pag_scale", g.pag},
                                       {"pag_applied_layers", g.pag > 0.0 ? nlohmann::json(g.pag_blocks) : nlohmann::json()}}},
                         {"transformer_batch", passes}, {"dtype", c10::toString(w.dtype)}, {"device", device.str()},
                         {"vae_strategy", video_vae_strategy_name(vae_choice.strategy)},
                         {"vae_decision", {{"requested", vae_choice.requested}, {"reason", vae_choice.reason},
                                           {"auto", vae_choice.facts},
                                           {"tiling", {{"tile", vae_choice.tiling.tile_sample_min_width},
                                                       {"stride", vae_choice.tiling.tile_sample_stride_width}}}}},
                         {"prompt", from_text ? nlohmann::json(*w.prompt) : nlohmann::json(nullptr)},
                         {"negative_prompt", from_text && g.cfg > 1.0 ? nlohmann::json(w.negative_prompt.value_or(""))
                                                                      : nlohmann::json(nullptr)},
                         {"prompt_embeddings", from_text ? "encoded by the text encoder (Gemma-3)"
                                               : run.prompt_embeds().empty() ? "none (dry run)" : "supplied"},
                         {"max_sequence_length", max_sequence_length}});

    // Text: Gemma-3 on the engine (its layers are execution groups of component text_encoder), unloaded before the
    // connectors run; its stacked hidden states are what --prompt-embeds would have supplied.
    if (from_text) {
        const auto text = run_text_stage(run, *encoder, {kPlugin, *w.prompt, w.negative_prompt, g.cfg > 1.0, encode_only,
                                                         max_sequence_length, w.dtype, device});
        if (!text) return;  // ddo-host encode: written (or validated in a dry run)
        embeds = *text;
    }

    // Connectors (the text path after Gemma-3), unloaded before the DiT's weights are opened.
    auto conn = open_engine_component(run, conn_plan, "connectors", image_connector_groups(m.connectors_config), w.dtype);
    if (run.dry_run()) {
        unload(run, conn);
        auto dit = open_engine_component(run, dit_plan, "transformer", image_transformer_groups(tc), w.dtype);
        unload(run, dit);
        run.log(2, from_text ? "dry run: checkpoint, tokenizer, text encoder and prompt validated; nothing computed"
                   : run.prompt_embeds().empty() ? "dry run: checkpoint validated (no prompt given); nothing computed"
                                                 : "dry run: checkpoint and embeddings validated; nothing computed");
        return;
    }
    if (run.phase() != "encode") run.begin_phase("encode");  // the text encoder's phase, when it ran
    const auto neg = embeds.neg_embeds.value_or(embeds.embeds);
    const auto neg_mask = embeds.neg_mask.value_or(embeds.mask);
    const auto [text_in, mask_in] = image_text_batch(g, embeds.embeds, embeds.mask, neg, neg_mask);
    const auto text = image_connectors_forward(m.connectors_config, *conn.view, text_in.to(device, w.dtype), mask_in.to(device));
    unload(run, conn);

    auto dit = open_engine_component(run, dit_plan, "transformer", image_transformer_groups(tc), w.dtype);
    run.begin_phase("denoise");
    ImageDenoiseSettings ds;
    ds.guidance = g;
    ds.dtype = w.dtype;
    ds.check_interrupted = [&](int step) { run.check_interrupted("at step " + std::to_string(step + 1)); };
    ds.on_step = [&](int step, int total) { run.step(step, total); };
    const auto noise = draw_image_noise(tc.in_channels, geo, 1, w.seed, device);
    const auto latents = image_denoise(tc, *dit.view, text, geo, noise, schedule, ds);
    unload(run, dit);

    // Decode: the strategy decided up front (vae.strategy; auto per seed 003's table: resident -> leaf -> tiled).
    run.begin_phase("decode");
    model::ComponentPlan vae_run_plan = vae_plan;
    if (vae_choice.strategy == VideoVaeStrategy::leaf_offload) vae_run_plan.route = engine::Route::dynamic;
    auto vae = open_engine_component(run, vae_run_plan, "vae", video_vae_leaf_groups(m.vae_config), w.dtype);
    at::Tensor image;
    {
        if (m.vae_config.timestep_conditioning)
            throw UsageError(std::string(kPlugin) + ": vae/config.json timestep_conditioning = true: decode noise is not "
                             "implemented for the image pipeline (the LTX-2.3 VAE is not timestep-conditioned)");
        const auto z = image_latents_for_decode(latents, geo, m.vae, m.vae_config).to(w.dtype);
        VideoVaeDecoder decoder(m.vae_config, *vae.view);
        decoder.set_stage_check(run.decode_stage_check());
        const auto pixels = decode_video(decoder, z, {}, vae_choice.strategy, vae_choice.tiling, run.decode_piece_progress("piece"));
        image = image_of(pixels).unsqueeze(0);
    }
    run.record_route("vae", vae_choice.requested, video_vae_strategy_name(vae_choice.strategy), vae_choice.reason);
    unload(run, vae);

    run.begin_phase("write_output");
    run.write_images(image);
}

}  // namespace ddo::ltx2
