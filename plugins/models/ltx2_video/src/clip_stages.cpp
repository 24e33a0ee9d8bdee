#include "clip_stages.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <memory>
#include <set>

#include "audio_vae_decoder.hpp"
#include "ddo/error.hpp"
#include "ddo/media/h264_round_trip.hpp"
#include "ddo/media/image_resize.hpp"
#include "ddo/model/condition_image.hpp"
#include "ddo/model/tensor_file.hpp"
#include "latent_upsampler.hpp"
#include "run_stages.hpp"
#include "transformer.hpp"
#include "video_two_stage.hpp"
#include "video_vae_decoder.hpp"
#include "video_vae_encoder.hpp"

namespace ddo::ltx2 {

const char * ClipConditions::pipeline_name() const {
    switch (pipeline) {
    case Pipeline::image_to_video: return "LTX2ImageToVideoPipeline";
    case Pipeline::condition: return "LTX2ConditionPipeline";
    case Pipeline::none: break;
    }
    return "none";
}

nlohmann::json ClipConditions::to_json() const {
    if (!any()) return nullptr;
    nlohmann::json items_json = nlohmann::json::array();
    for (const auto & i : items)
        items_json.push_back({{"frame", i.frame}, {"latent_index", i.latent_index}, {"strength", i.strength}});
    return {{"pipeline", pipeline_name()}, {"image_crf", crf}, {"conditions", items_json}};
}

namespace {

// LTX2ConditionPipeline.preprocess_conditions: the uint8 frame as float32 [1, 3, H, W], scaled by
// max(height / h, width / w) with ceil, F.interpolate(bilinear, align_corners=False), center-cropped, x / 127.5 - 1.
at::Tensor cover_and_crop(const media::Image8 & rgb, int64_t height, int64_t width) {
    auto px = at::from_blob(const_cast<std::uint8_t *>(rgb.pixels.data()), {1, rgb.height, rgb.width, 3}, at::kByte)
                  .to(at::kFloat)
                  .permute({0, 3, 1, 2});
    const double scale = std::max(double(height) / rgb.height, double(width) / rgb.width);
    const auto new_h = int64_t(std::ceil(rgb.height * scale)), new_w = int64_t(std::ceil(rgb.width * scale));
    px = at::upsample_bilinear2d(px, {new_h, new_w}, false, std::nullopt, std::nullopt);
    px = px.narrow(2, (new_h - height) / 2, height).narrow(3, (new_w - width) / 2, width);
    return (px / 127.5 - 1.0).unsqueeze(2).contiguous();
}

[[noreturn]] void off_grid(const model::ConditionImage & im, const LatentRatios & r, int64_t frames) {
    const int64_t below = (im.frame - 1) / r.temporal * r.temporal + 1, above = below + r.temporal;
    std::string near = "@" + std::to_string(below);
    if (above < frames) near += " or @" + std::to_string(above);
    throw UsageError("--image " + im.path.string() + "@" + std::to_string(im.frame) + ": frame " +
                     std::to_string(im.frame) + " is not on the latent grid (LTX-2 conditions frame 0 or 1 + " +
                     std::to_string(r.temporal) + "k, one latent frame each); use " + near);
}

}  // namespace

ClipConditions resolve_conditions(model::ModelRun & run, const LatentRatios & r, const LatentGeometry & g) {
    ClipConditions c;
    const auto images = run.condition_images();
    if (images.empty()) return c;
    c.crf = run.option<int>("image_crf", 33);
    if (c.crf < 0 || c.crf > 51)
        throw UsageError("plugin.ltx2_video.image_crf = " + std::to_string(c.crf) + ": libx264's CRF is 0..51 (33 is "
                         "LTX-2.0-2.3's default, 0 skips the re-compression)");
    const bool i2v = images.size() == 1 && images[0].frame == 0;
    c.pipeline = i2v ? ClipConditions::Pipeline::image_to_video : ClipConditions::Pipeline::condition;
    std::set<int64_t> taken;
    for (size_t i = 0; i < images.size(); ++i) {
        const auto & im = images[i];
        if (im.frame >= g.frames)
            throw UsageError("--image " + im.path.string() + "@" + std::to_string(im.frame) + ": the clip has frames 0.." +
                             std::to_string(g.frames - 1));
        const auto latent_index = latent_index_of(r, im.frame);
        if (!latent_index) off_grid(im, r, g.frames);
        if (!taken.insert(*latent_index).second)
            throw UsageError("--image " + im.path.string() + "@" + std::to_string(im.frame) + ": another image already "
                             "conditions latent frame " + std::to_string(*latent_index) + "; one image per frame");
        const auto rgb = media::h264_round_trip(model::rgb_of(im.image), c.crf);
        nlohmann::json pre = {{"crf", c.crf}, {"width", g.width}, {"height", g.height}};
        at::Tensor px;
        if (i2v) {
            const auto resized = media::resize_like_vae_image_processor(rgb, int(g.height), int(g.width),
                                                                        int(r.spatial), "bilinear");
            px = model::image_to_tensor(resized).unsqueeze(2);
            pre["resize"] = "stretch";
            pre["filter"] = "PIL bilinear (LTX2ImageToVideoPipeline's VideoProcessor)";
        } else {
            px = cover_and_crop(rgb, g.height, g.width);
            pre["resize"] = "cover + center crop";
            pre["filter"] = "bilinear interpolation on float pixels (LTX2ConditionPipeline)";
        }
        run.record_image_preprocess(i, pre);
        c.items.push_back({px, im.frame, *latent_index, 1.0});
    }
    return c;
}

std::vector<at::Tensor> encode_conditions(model::ModelRun & run, const VideoModel & m, const model::ComponentPlan & vae,
                                          const ClipConditions & c, at::ScalarType dtype) {
    std::vector<at::Tensor> out;
    if (!c.any()) return out;
    run.begin_phase("encode_image");
    model::ComponentPlan plan = vae;
    plan.component = "vae_encoder";  // its own counters in the report; the decoder's stay "vae"
    auto enc = open_engine_component(run, plan, "vae", video_vae_encoder_leaf_groups(m.vae_config), dtype);
    VideoVaeEncoder encoder(m.vae_config, *enc.view);
    encoder.set_stage_check([&](const std::string & stage) { run.check_interrupted("encoding (" + stage + ")"); });
    const auto stats = read_video_latent_stats(m.vae, m.vae_config);
    for (const auto & item : c.items) {
        const auto z = encoder.encode(item.pixels.to(dtype));
        // LTX2ImageToVideoPipeline casts to float32 before normalising; LTX2ConditionPipeline normalises in the
        // VAE's dtype and casts after.
        out.push_back(c.pipeline == ClipConditions::Pipeline::image_to_video
                          ? normalize_video_latents(z.to(at::kFloat), stats.mean, stats.std, 1.0)
                          : normalize_video_latents(z, stats.mean, stats.std, 1.0).to(at::kFloat));
    }
    unload(run, enc);
    return out;
}

nlohmann::json TwoStage::to_json() const {
    return {{"upsampler", path.string()}, {"upsampler_kind", config.describe()},
            {"stage1", {{"width", stage1.width}, {"height", stage1.height},
                        {"latent", {{"frames", stage1.latent_frames}, {"height", stage1.latent_height},
                                    {"width", stage1.latent_width}}}}},
            {"stage2", {{"sigmas", model::grid_json(schedule.sigmas)}, {"noise_scale", noise_scale},
                        {"guidance_scale", settings.video.cfg}}}};
}

std::optional<TwoStage> resolve_two_stage(model::ModelRun & run, const VideoModel & m, const LatentGeometry & clip,
                                          const DenoiseSettings & stage1) {
    const auto asked = run.option<std::string>("upsampler", "");
    if (asked.empty()) return std::nullopt;
    TwoStage ts;
    ts.path = asked;
    std::error_code ec;
    if (!std::filesystem::exists(ts.path, ec))
        throw UsageError("plugin.ltx2_video.upsampler = " + asked + ": no such file or folder; give the checkpoint's "
                         "latent_upsampler folder (config.json + weights) or an upscaler .safetensors file");
    const bool folder = std::filesystem::is_directory(ts.path, ec);
    ts.source = folder ? store::ComponentSource(ts.path) : store::ComponentSource(ts.path.parent_path(), ts.path);
    const auto f = folder ? model::TensorFile::open_component(ts.path) : model::TensorFile::open_file(ts.path);
    ts.config = folder ? LatentUpsamplerConfig::load(ts.path) : LatentUpsamplerConfig::from_weights(f, ts.path);
    validate_latent_upsampler_checkpoint(f, ts.config);
    check_latent_upsampler_fits_vae(ts.config, m.vae_config);
    ts.groups = latent_upsampler_groups(ts.config, f);
    ts.weights = f.file_of(f.names().front());
    const auto r = m.ratios();
    ts.stage1 = latent_geometry(r, clip.duration_frames, clip.height / 2, clip.width / 2, stage1.fps);
    if (ts.config.out_frames(ts.stage1.latent_frames) != clip.latent_frames ||
        ts.config.out_height(ts.stage1.latent_height) != clip.latent_height ||
        ts.config.out_width(ts.stage1.latent_width) != clip.latent_width)
        throw UsageError("plugin.ltx2_video.upsampler = " + asked + ": a two-stage run takes a spatial x2 upsampler "
                         "(stage 1 at half size); this one is " + ts.config.describe());
    const auto grid = run.option<std::vector<double>>("stage2_sigmas", {0.909375, 0.725, 0.421875});
    if (grid.empty())
        throw UsageError("plugin.ltx2_video.stage2_sigmas is empty; give the stage-2 grid (default "
                         "STAGE_2_DISTILLED_SIGMA_VALUES [0.909375, 0.725, 0.421875])");
    ts.sigmas = model::sigmas_from(grid);
    ts.schedule = ltx2_schedule(m.scheduler_config, m.scheduler_json, ts.sigmas, clip.video_tokens());
    ts.noise_scale = grid.front();
    ts.settings = stage1;
    ts.settings.video.cfg = run.option<double>("stage2_guidance_scale", 1.0);
    ts.plan = run.plan("latent_upsampler");
    run.record_input("latent_upsampler", ts.weights);
    return ts;
}

namespace {

// The connectors' output for a stage: the whole [neg; pos] batch when it runs CFG, else the prompt's rows (the
// batch holds the negative prompt when the other stage guides).
ConnectorsOutput text_for(const DenoiseSettings & s, const ConnectorsOutput & text) {
    if (guidance_passes(s.video, s.audio).cfg || text.video.size(0) == 1) return text;
    return {text.video.chunk(2, 0)[1], text.audio.chunk(2, 0)[1], text.mask.chunk(2, 0)[1]};
}

// Phase "upsample": the upsampler on its plan, once, unloaded.
at::Tensor upsample(model::ModelRun & run, const VideoModel & m, const TwoStage & ts, const at::Tensor & packed,
                    at::ScalarType dtype) {
    auto cw = run.open_weights(ts.plan, ts.source, ts.groups, dtype);
    auto view = std::make_unique<EngineWeights>(*cw, ts.groups, dtype, ts.plan.placement.device());
    const LatentUpsampler up(ts.config, *view);
    const auto stats = read_video_latent_stats(m.vae, m.vae_config);
    auto out = upsample_video_latents(up, packed, ts.stage1.latent_frames, ts.stage1.latent_height,
                                      ts.stage1.latent_width, stats, m.vae_config.scaling_factor);
    view.reset();
    run.unload(std::move(cw));
    return out;
}

}  // namespace

ClipDenoised denoise_clip(model::ModelRun & run, const ClipDenoise & d, const ConnectorsOutput & text) {
    const auto & m = d.model;
    const auto & tc = m.transformer_config;
    auto dit = open_engine_component(run, d.transformer, "transformer", transformer_groups(tc), d.dtype);
    run.begin_phase("denoise");
    DenoiseCallbacks cb;
    cb.check_interrupted = [&](int step) { run.check_interrupted("at step " + std::to_string(step + 1)); };
    cb.on_step = [&](int step, int total) { run.step(step, total); };
    const auto device = d.transformer.placement.device();
    const auto r = m.ratios();
    const auto & g1 = d.two_stage ? d.two_stage->stage1 : d.geo;
    auto gen = noise_generator(d.seed);
    const auto & c = d.conditions;
    const bool i2v = c.pipeline == ClipConditions::Pipeline::image_to_video;
    ConditionedStart s1;
    if (i2v) {
        s1 = first_frame_start(d.condition_latents.at(0), r, g1, 1, gen, device);
    } else if (c.any()) {
        std::vector<LatentCondition> lc;
        for (size_t i = 0; i < c.items.size(); ++i)
            lc.push_back({d.condition_latents.at(i), c.items[i].latent_index, 1, c.items[i].strength});
        s1 = blend_start(lc, r, g1, d.condition_noise_scale, d.settings.fps, 1, d.seed, device);
    } else {
        const auto n = draw_noise(r, g1, 1, gen, device);
        s1.video = n.video;
        s1.audio = n.audio;
    }
    const VideoConditioning * cond1 = c.any() ? &s1.conditioning : nullptr;
    auto out = denoise(tc, *dit.view, text_for(d.settings, text), g1, {s1.video, s1.audio}, d.schedule, d.settings, cb,
                       cond1);
    run.finish_step_cache();
    if (d.two_stage) {
        const auto & ts = *d.two_stage;
        run.begin_phase("upsample");
        const auto upscaled = upsample(run, m, ts, out.video, d.dtype);
        run.begin_phase("denoise_stage2");
        ResidentWeights audio_stats(m.audio_vae, at::kFloat, at::kCPU);
        auto s2 = stage2_start(upscaled, out.audio, audio_stats, d.geo, ts.noise_scale, i2v, gen, device);
        // cache.*: stage 2 with a cache of its own, fresh state for its schedule, or none below cache.min_steps
        // (Note [Step caching], "Two-stage runs").
        auto settings2 = ts.settings;
        settings2.step_cache = run.step_cache_stage(int(ts.sigmas.size()));
        if (settings2.step_cache) settings2.step_cache->bind_modules(hookable_module_names(tc), diffusers_module_names(tc));
        out = denoise(tc, *dit.view, text_for(settings2, text), d.geo, {s2.video, s2.audio}, ts.schedule, settings2,
                      cb, i2v ? &s2.conditioning : nullptr);
        run.finish_step_cache();
    }
    unload(run, dit);
    // LTX2Pipeline draws the decode noise after the loop, from the generator of the start noise (Note [LTX-2 decode
    // noise]); resolve_decode_noise refuses it for the runs whose draws ddo does not carry that way.
    ClipDenoised result{out, {}};
    if (d.decode_noise) result.decode_noise = draw_decode_noise(r, d.geo, 1, gen, d.dtype);
    return result;
}

}  // namespace ddo::ltx2
