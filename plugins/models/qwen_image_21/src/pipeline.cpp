#include "pipeline.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"
#include "vae_blocks.hpp"

namespace ddo::qwen_image_21 {
namespace {

nlohmann::json read_json(const std::filesystem::path & p) {
    std::ifstream in(p);
    if (!in) throw RuntimeError(p.string() + ": missing; point --model at a diffusers-layout Qwen-Image 2.1 checkpoint");
    try {
        return nlohmann::json::parse(in);
    } catch (const std::exception & e) {
        throw RuntimeError(p.string() + ": not valid JSON (" + e.what() + ")");
    }
}

std::optional<at::Tensor> mask_or_none(const TensorFile & f, const std::string & name, const at::Tensor & embeds) {
    if (!f.contains(name)) return std::nullopt;
    auto m = f.read(name);
    if (m.dim() != 2 || m.size(0) != embeds.size(0) || m.size(1) != embeds.size(1))
        throw RuntimeError(f.file_of(name).string() + ": tensor '" + name + "' must have shape [B, L] of its embeddings");
    m = m.to(at::kBool);
    if (m.all().item<bool>()) return std::nullopt;  // encode_prompt drops an all-valid mask
    return m;
}

[[noreturn]] void throw_not_finite(const FlowMatchSchedule & sched, int i, int steps, const PipelineOptions & o) {
    // The schedule itself was checked before the first step (model::require_finite).
    const std::string why = o.dtype == at::kHalf
                                ? "the transformer overflowed in fp16; use workload.precision = \"bf16\" or \"fp32\""
                                : "the transformer produced non-finite values; check the checkpoint (a corrupt or "
                                  "mismatched transformer) and the prompt embeddings";
    throw RuntimeError("qwen_image_21: the latents are not finite after step " + std::to_string(i + 1) + " of " +
                       std::to_string(steps) + " (sigma " + std::to_string(sched.sigmas[size_t(i)]) + " -> " +
                       std::to_string(sched.sigmas[size_t(i) + 1]) + "): " + why);
}

// One transformer forward. With a KV cache: extract writes each layer's prefix K/V (then moved to host memory when
// the cache lives there); cached reads it (copied to the device per layer when it lives on the host).
at::Tensor run_transformer(const Transformer & tr, BlockSource & blocks, const TransformerInputs & in, KvMode mode,
                           std::vector<KvLayerCache> * caches, const PipelineOptions & o, KvCacheStats & stats,
                           const char * branch, int step) {
    auto st = tr.prepare(in, mode);
    const auto host = at::TensorOptions().device(at::kCPU).pinned_memory(o.kv_cache_pinned);
    model::StepCache * const step_cache = o.step_cache;
    // taylorseer (Note [Step caching]): the hooked modules by their diffusers names, in this guidance branch.
    auto hooked = [&](const std::string & name, const std::function<at::Tensor()> & compute) {
        return step_cache->module(branch, name, [&] { return model::Outputs{compute()}; }).outputs.front();
    };
    auto block = [&](int64_t i, const at::Tensor & x) {
        const auto & w = blocks.acquire(i);
        KvLayerCache * cache = caches ? &(*caches)[size_t(i)] : nullptr;
        KvLayerCache on_device;
        if (cache && mode == KvMode::cached && o.kv_cache_on_host) {
            on_device = {cache->k.to(o.device, /*non_blocking=*/true), cache->v.to(o.device, /*non_blocking=*/true)};
            stats.bytes_to_device += uint64_t(cache->k.nbytes() + cache->v.nbytes());
            cache = &on_device;
        }
        ModuleHook hook;
        if (step_cache && step_cache->settings().kind == model::StepCacheKind::taylorseer)
            hook = [&, prefix = "transformer_blocks." + std::to_string(i) + "."](
                       const char * m, const std::function<at::Tensor()> & compute) { return hooked(prefix + m, compute); };
        auto out = run_block(tr.config(), w, x, st.ctx, cache, hook);
        blocks.release(i);
        if (!caches) return out;
        auto & kept = (*caches)[size_t(i)];
        if (mode == KvMode::extract) {
            ++stats.extracts;
            stats.bytes += uint64_t(kept.k.nbytes() + kept.v.nbytes());
            if (o.kv_cache_on_host && kept.k.device() != at::Device(at::kCPU)) {
                kept.k = kept.k.to(host.dtype(kept.k.scalar_type()));
                kept.v = kept.v.to(host.dtype(kept.v.scalar_type()));
            }
        } else if (mode == KvMode::cached) {
            ++stats.hits;
        }
        return out;
    };
    const int64_t layers = tr.config().num_layers;
    if (o.step_cache) {
        // Note [Step caching]: the block is single-stream (the joint text + image sequence is its one hidden state).
        // A prefix layer the cache skips keeps the K/V extracted at step 0, which later steps read unchanged.
        st.x = o.step_cache
                   ->run(branch, step, {st.x}, layers,
                         [&](int64_t i, const model::Streams & x) { return model::Streams{block(i, x.front())}; },
                         [&](int64_t i) { return blocks.skip(i); })
                   .front();
    } else {
        for (int64_t i = 0; i < layers; ++i) st.x = block(i, st.x);
    }
    if (step_cache && step_cache->hooked("proj_out"))
        return tr.finish(st, [&](const std::function<at::Tensor()> & compute) { return hooked("proj_out", compute); });
    return tr.finish(st);
}

// prepare_latents: one randn((B, 1, C, h, w)) from a CPU generator seeded like torch.Generator().manual_seed, packed;
// or the caller's latents as given.
at::Tensor initial_latents(const PipelineOptions & o, int64_t B, int64_t C, int64_t h, int64_t w) {
    if (o.latents) {
        if (o.latents->sizes() != at::IntArrayRef({B, h * w, C}))
            throw UsageError("qwen_image_21: the initial latents have shape " + shape_str(o.latents->sizes()) + ", expected [" +
                             std::to_string(B) + ", " + std::to_string(h * w) + ", " + std::to_string(C) + "]");
        return o.latents->to(o.device, o.dtype);
    }
    auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
    auto noise = at::randn({B, 1, C, h, w}, gen, at::TensorOptions().dtype(o.dtype));
    return noise.view({B, C, h * w}).transpose(1, 2).to(o.device);
}

// One side of the guidance as the transformer reads it: the embeddings, the img_mask (the VLM's image slots, i.e. the
// references' <|image_pad|> positions, then one slot per 2x2 target latents) and the padding mask.
struct PromptInputs {
    at::Tensor embeds, img_mask;
    std::optional<at::Tensor> mask;
};

PromptInputs prompt_inputs(const at::Tensor & embeds, const std::optional<at::Tensor> & pads,
                           const std::optional<at::Tensor> & mask, const at::Tensor & target_slots,
                           const PipelineOptions & o) {
    PromptInputs p;
    p.embeds = embeds.to(o.device, o.dtype);
    auto vlm = pads ? pads->to(o.device, at::kBool)
                    : at::zeros({embeds.size(0), embeds.size(1)}, target_slots.options());
    p.img_mask = at::cat({vlm, target_slots}, 1);
    if (mask) p.mask = mask->to(o.device);  // assigned, not a conditional expression: GCC 12 -Wmaybe-uninitialized
    return p;
}

}  // namespace

PromptEmbeds load_prompt_embeds(const std::filesystem::path & path, int64_t context_in_dim) {
    auto f = TensorFile::open_file(path);
    PromptEmbeds e;
    auto embeds = [&](const std::string & name) {
        auto t = f.read(name);
        if (!at::isFloatingType(t.scalar_type()) || t.dim() != 3 || t.size(2) != context_in_dim)
            throw RuntimeError(path.string() + ": tensor '" + name + "' must be floating [B, L, " +
                               std::to_string(context_in_dim) + "] (the transformer's context_in_dim)");
        return t;
    };
    if (!f.contains("prompt_embeds"))
        throw RuntimeError(path.string() + ": tensor 'prompt_embeds' is missing; write it with "
                                           "tools/reference/qwen_image_21_fixtures.py or the pipeline's encode_prompt");
    e.embeds = embeds("prompt_embeds");
    e.mask = mask_or_none(f, "prompt_embeds_mask", e.embeds);
    if (f.contains("negative_prompt_embeds")) {
        e.neg_embeds = embeds("negative_prompt_embeds");
        e.neg_mask = mask_or_none(f, "negative_prompt_embeds_mask", *e.neg_embeds);
    }
    return e;
}

PromptEmbeds repeat_per_prompt(const PromptEmbeds & e, int64_t n) {
    if (n <= 1) return e;
    auto rep = [n](const at::Tensor & t) {
        const int64_t B = t.size(0), L = t.size(1);
        return t.dim() == 3 ? t.repeat({1, n, 1}).view({B * n, L, t.size(2)}) : t.repeat({1, n}).view({B * n, L});
    };
    PromptEmbeds r;
    r.embeds = rep(e.embeds);
    if (e.mask) r.mask = rep(*e.mask);
    if (e.neg_embeds) r.neg_embeds = rep(*e.neg_embeds);
    if (e.neg_mask) r.neg_mask = rep(*e.neg_mask);
    // The pipeline keeps image_pad_mask per prompt (the transformer reads the layout from row 0); repeated here
    // like the embeddings so that every row has its own.
    if (e.image_pad_mask) r.image_pad_mask = rep(*e.image_pad_mask);
    if (e.neg_image_pad_mask) r.neg_image_pad_mask = rep(*e.neg_image_pad_mask);
    return r;
}

at::Tensor load_initial_latents(const std::filesystem::path & path, int64_t B, int64_t C, int64_t width,
                                int64_t height) {
    const int64_t h = 2 * (height / 32), w = 2 * (width / 32);
    auto f = TensorFile::open_file(path);
    const std::string want = "[" + std::to_string(B) + ", " + std::to_string(h * w) + ", " + std::to_string(C) +
                             "] (packed, as QwenImage21Pipeline's latents=) or [" + std::to_string(B) + ", 1, " +
                             std::to_string(C) + ", " + std::to_string(h) + ", " + std::to_string(w) + "]";
    if (!f.contains("latents"))
        throw UsageError(path.string() + ": no tensor 'latents'; --latents takes a safetensors file whose tensor "
                         "'latents' is " + want);
    auto t = f.read("latents");
    if (!at::isFloatingType(t.scalar_type()))
        throw UsageError(path.string() + ": tensor 'latents' is not floating point");
    if (t.sizes() == at::IntArrayRef({B, 1, C, h, w})) t = t.reshape({B, C, h * w}).transpose(1, 2).contiguous();
    if (t.sizes() != at::IntArrayRef({B, h * w, C}))
        throw UsageError(path.string() + ": tensor 'latents' has shape " + shape_str(t.sizes()) + "; for " +
                         std::to_string(width) + "x" + std::to_string(height) + " and " + std::to_string(B) +
                         " image(s) it must be " + want);
    return t;
}

ModelFiles ModelFiles::open(const std::filesystem::path & dir, const store::ComponentSource & transformer) {
    const auto tcfg = dir / "transformer" / "config.json";
    const auto vcfg = dir / "vae" / "config.json";
    const auto scfg = dir / "scheduler" / "scheduler_config.json";
    ModelFiles m{TransformerConfig::from_json(read_json(tcfg), tcfg), VaeConfig::from_json(read_json(vcfg), vcfg),
                 SchedulerConfig::from_json(read_json(scfg), scfg), TensorFile::open_component(transformer),
                 TensorFile::open_component(dir / "vae"), std::nullopt};
    const auto index = dir / "model_index.json";
    if (std::filesystem::is_regular_file(index)) {
        const auto j = read_json(index);
        if (j.contains("sample_sigmas") && !j.at("sample_sigmas").is_null()) {
            const auto & a = j.at("sample_sigmas");
            std::vector<double> v;
            if (a.is_array())
                for (const auto & e : a) {
                    if (!e.is_number() || !(e.get<double>() > 0.0 && e.get<double>() <= 1.0)) {
                        v.clear();
                        break;
                    }
                    v.push_back(e.get<double>());
                }
            if (v.empty() || v.size() != a.size())
                throw RuntimeError(index.string() + ": sample_sigmas must be a non-empty array of numbers in (0, 1] "
                                   "(the default sigmas, excluding the terminal one); fix or remove the key");
            m.sample_sigmas = std::move(v);
        }
    }
    validate_transformer_checkpoint(m.transformer, m.transformer_config);
    // The decoder half is needed by every run: check it from the header now, not after denoising.
    validate_vae_checkpoint(m.vae, m.vae_config, vae_decoder_spec(m.vae_config));
    if (m.transformer_config.in_channels != m.vae_config.z_dim)
        throw RuntimeError(tcfg.string() + ": in_channels " + std::to_string(m.transformer_config.in_channels) +
                           " contradicts z_dim " + std::to_string(m.vae_config.z_dim) + " in " + vcfg.string());
    return m;
}

at::Tensor denoise(const ModelFiles & m, const Transformer & transformer, BlockSource & blocks,
                   const PromptEmbeds & e, const PipelineOptions & o, const PipelineCallbacks & cb,
                   const ReferenceLatents * refs, KvCacheStats * kv_stats) {
    const auto & tc = m.transformer_config;
    const int64_t vsf = 16, multiple = vsf * 2;
    const int64_t width = o.width / multiple * multiple, height = o.height / multiple * multiple;
    if (width <= 0 || height <= 0)
        throw UsageError("qwen_image_21: width and height must be at least " + std::to_string(multiple));
    const int64_t h = 2 * (height / multiple), w = 2 * (width / multiple);
    const int64_t B = e.embeds.size(0), C = tc.in_channels;
    const bool cfg = o.true_cfg_scale > 1.0 && e.neg_embeds.has_value();

    at::Tensor latents = initial_latents(o, B, C, h, w);

    const double mu = calculate_shift(double(h * w), m.scheduler_config);
    const auto sched = o.sigmas.empty() ? make_schedule(m.scheduler_config, o.steps, mu)
                                        : make_schedule(m.scheduler_config, o.sigmas, mu);
    model::require_finite(sched, "qwen_image_21",
                          "the scheduler's shift_terminal stretch divides by zero on a grid that ends at sigma 1 (one "
                          "step; scheduler/scheduler_config.json), or the dynamic shift's exp(mu) overflows for this "
                          "many latent tokens; use 2 or more steps, a sigma list (workload.sigmas) that does not end "
                          "at 1, or a smaller size");
    const int steps = int(sched.timesteps.size());

    auto opts = at::TensorOptions().device(o.device);
    const auto target_slots = at::ones({B, h * w / 4}, opts.dtype(at::kBool));
    const auto pos = prompt_inputs(e.embeds, e.image_pad_mask, e.mask, target_slots, o);
    PromptInputs neg;
    if (cfg) neg = prompt_inputs(*e.neg_embeds, e.neg_image_pad_mask, e.neg_mask, target_slots, o);
    const bool cache_on = o.use_kv_cache && tc.causal_condition;
    std::vector<KvLayerCache> pos_cache(size_t(tc.num_layers)), neg_cache(size_t(tc.num_layers));
    // The joint sequence's images: the references first, the target last (img_shapes).
    std::vector<ImageShape> shapes;
    at::Tensor ref_latents;
    if (refs) {
        shapes = refs->shapes;
        ref_latents = refs->packed.to(o.device, o.dtype).expand({B, refs->packed.size(1), refs->packed.size(2)});
    }
    shapes.push_back({1, h, w});
    auto model_input = [&](const at::Tensor & x) { return refs ? at::cat({ref_latents, x}, 1) : x; };
    KvCacheStats stats;

    for (int i = 0; i < steps; ++i) {
        if (cb.check_interrupted) cb.check_interrupted(i);
        const KvMode mode = cache_on ? (i == 0 ? KvMode::extract : KvMode::cached) : KvMode::off;
        auto timestep = (at::full({B}, double(sched.timesteps[size_t(i)]), opts.dtype(at::kFloat)).to(o.dtype)) / 1000;
        TransformerInputs in{model_input(latents), pos.embeds, timestep, shapes, pos.img_mask, pos.mask};
        // sea (Note [Step caching]): the gate reads the step's sigma (the scheduler's float32 value) and the target
        // latents as images, (C, 1, h, w) per sample: QwenImage21Pipeline._unpack_latents of the packed tokens.
        auto observe = [&](const char * branch) {
            if (!o.step_cache) return;
            o.step_cache->observe(branch, double(sched.sigmas[size_t(i)]),
                                  latents.transpose(1, 2).reshape({B, C, 1, h, w}).unbind(0));
        };
        observe("cond");
        auto noise_pred = run_transformer(transformer, blocks, in, mode, cache_on ? &pos_cache : nullptr, o, stats, "cond", i);
        if (i == 0 && cache_on) stats.prefix_tokens = pos_cache.front().k.size(1);
        noise_pred = noise_pred.slice(1, noise_pred.size(1) - latents.size(1));
        if (cfg) {
            TransformerInputs nin{model_input(latents), neg.embeds, timestep, shapes, neg.img_mask, neg.mask};
            observe("uncond");
            auto neg_pred = run_transformer(transformer, blocks, nin, mode, cache_on ? &neg_cache : nullptr, o, stats, "uncond", i);
            neg_pred = neg_pred.slice(1, neg_pred.size(1) - latents.size(1));
            noise_pred = neg_pred + o.true_cfg_scale * (noise_pred - neg_pred);
        }
        // FlowMatchEulerDiscreteScheduler.step, back to v's dtype.
        latents = model::euler_step(latents, noise_pred, sched.sigmas[size_t(i)], sched.sigmas[size_t(i) + 1])
                      .to(noise_pred.scalar_type());
        // One reduction per step: a NaN here would otherwise decode to an all-black image and exit 0.
        if (!at::isfinite(latents).all().item<bool>()) throw_not_finite(sched, i, steps, o);
        if (cb.on_step) cb.on_step(i + 1, steps);
    }
    if (kv_stats) *kv_stats = stats;
    return latents;
}

at::Tensor decode_latents(const ModelFiles & m, const VaeDecoder & vae, const at::Tensor & latents,
                          const PipelineOptions & o) {
    const auto & vc = m.vae_config;
    const int64_t multiple = 32;
    const int64_t h = 2 * (o.height / multiple), w = 2 * (o.width / multiple);
    const int64_t B = latents.size(0), C = latents.size(2);
    auto z = latents.transpose(1, 2).reshape({B, C, 1, h, w}).to(vae.dtype());
    auto mean = at::tensor(vc.latents_mean, at::kFloat).view({1, vc.z_dim, 1, 1, 1}).to(z.options());
    auto std = at::tensor(vc.latents_std, at::kFloat).view({1, vc.z_dim, 1, 1, 1}).to(z.options());
    z = z * std + mean;
    auto image = vae.decode(z).select(2, 0);
    return (image / 2 + 0.5).clamp(0, 1);
}

}  // namespace ddo::qwen_image_21
