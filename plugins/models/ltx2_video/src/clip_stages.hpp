// The ltx2_video run's stages around the DiT (docs/architecture.md, "The ltx2_video run"; Note [LTX-2 image
// conditioning], Note [LTX-2 two-stage runs]): the condition images (--image FILE[@FRAME]) preprocessed as the
// pipeline they follow does it and encoded by the video VAE's encoder (phase "encode_image"), the two-stage plan
// (plugin.ltx2_video.upsampler), and the denoising of the clip: stage 1 ("denoise"), the latent upsampler
// ("upsample", loaded, run once, unloaded) and stage 2 ("denoise_stage2") on one load of the DiT.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "connectors.hpp"
#include "ddo/model/component_plan.hpp"
#include "ddo/model/component_weights.hpp"
#include "ddo/model/flow_match.hpp"
#include "ddo/model/model_run.hpp"
#include "latent_upsampler_config.hpp"
#include "latents.hpp"
#include "video_conditions.hpp"
#include "video_denoise.hpp"
#include "video_model.hpp"

namespace ddo::ltx2 {

// The condition images as the pipeline they follow preprocesses them: one still on frame 0 follows
// LTX2ImageToVideoPipeline (VideoProcessor's PIL bilinear stretch); keyframes (a frame other than 0, or several
// images) follow LTX2ConditionPipeline (bilinear interpolation to cover the clip, center crop). Both re-compress a
// still through H.264 at plugin.ltx2_video.image_crf first (33, LTX-2.0-2.3's default; 0 skips it).
struct ClipConditions {
    enum class Pipeline { none, image_to_video, condition };
    struct Item {
        at::Tensor pixels;          // [1, 3, 1, H, W] in [-1, 1], float32
        int64_t frame = 0;          // the pixel frame asked for
        int64_t latent_index = 0;   // where it goes
        double strength = 1.0;
    };
    Pipeline pipeline = Pipeline::none;
    std::vector<Item> items;
    int crf = 33;
    bool any() const { return pipeline != Pipeline::none; }
    const char * pipeline_name() const;
    nlohmann::json to_json() const;
};

// workload.images read and preprocessed for a clip of geometry `g` (pixels g.width x g.height: stage 1's for a
// two-stage run). UsageError (exit 2): a frame past the clip or off the latent grid (naming the nearest frames
// that are on it), more than one image per frame. Each image's preprocessing is recorded in the report.
ClipConditions resolve_conditions(model::ModelRun & run, const LatentRatios & r, const LatentGeometry & g);

// Phase "encode_image": the video VAE's encoder on `vae` (its leaf groups; reported as component "vae_encoder"),
// each condition encoded (the mode) and normalised as the pipelines normalise it (scaling factor 1); unloaded.
std::vector<at::Tensor> encode_conditions(model::ModelRun & run, const VideoModel & m, const model::ComponentPlan & vae,
                                          const ClipConditions & c, at::ScalarType dtype);

// A two-stage run: stage 1 at half the clip's size on the run's sigmas, the latent upsampler, stage 2 at the clip's
// size on plugin.ltx2_video.stage2_sigmas (STAGE_2_DISTILLED_SIGMA_VALUES) from noise_scale = its first sigma,
// with video guidance plugin.ltx2_video.stage2_guidance_scale (1.0, the documented recipe's) and the run's other
// guidance settings.
struct TwoStage {
    std::filesystem::path path;        // plugin.ltx2_video.upsampler: a component folder or a .safetensors file
    std::filesystem::path weights;     // the weights file
    store::ComponentSource source{std::filesystem::path{}};  // the folder, or the file beside its parent
    LatentUpsamplerConfig config;
    std::vector<model::GroupSpec> groups;  // latent_upsampler_groups
    LatentGeometry stage1;             // the clip at half size (the run's geometry is stage 2's)
    std::vector<float> sigmas;
    model::FlowMatchSchedule schedule;
    double noise_scale = 0.0;
    DenoiseSettings settings;          // stage 2's
    model::ComponentPlan plan;         // component latent_upsampler
    nlohmann::json to_json() const;
};

// nullopt without plugin.ltx2_video.upsampler. UsageError (exit 2) naming the key: a missing path, an upsampler
// that does not fit the VAE or is not a spatial x2, keyframe conditions; RuntimeError for a broken file.
std::optional<TwoStage> resolve_two_stage(model::ModelRun & run, const VideoModel & m, const LatentGeometry & clip,
                                          const DenoiseSettings & stage1);

struct ClipDenoise {
    const VideoModel & model;
    const model::ComponentPlan & transformer;
    const LatentGeometry & geo;                 // the clip's (stage 2's for a two-stage run)
    const model::FlowMatchSchedule & schedule;  // stage 1's
    const DenoiseSettings & settings;           // stage 1's
    const std::optional<TwoStage> & two_stage;
    const ClipConditions & conditions;
    const std::vector<at::Tensor> & condition_latents;
    uint64_t seed = 0;
    double condition_noise_scale = 1.0;         // LTX2ConditionPipeline's noise_scale: the grid's first sigma
    at::ScalarType dtype = at::kFloat;
    bool decode_noise = false;                  // draw LTX2Pipeline's decode noise after the last step
};

struct ClipDenoised {
    Denoised latents;
    at::Tensor decode_noise;  // draw_decode_noise from the run's generator when ClipDenoise::decode_noise, else undefined
};

// Phase "denoise" (stage 1), then for two stages "upsample" and "denoise_stage2"; the DiT is opened once and
// unloaded after the last step. text: the connectors' output ([neg; pos] when either stage runs CFG).
ClipDenoised denoise_clip(model::ModelRun & run, const ClipDenoise & d, const ConnectorsOutput & text);

}  // namespace ddo::ltx2
