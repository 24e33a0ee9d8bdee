#include "run_stages.hpp"

#include "ddo/error.hpp"
#include "ddo/model/tensor_output.hpp"

namespace ddo::ltx2 {

PromptEmbeds load_prompt_embeds(const std::filesystem::path & path, const ConnectorsConfig & c) {
    const auto f = model::TensorFile::open_file(path);
    const int64_t features = c.caption_channels * c.text_proj_in_factor;
    auto embeds_of = [&](const char * name) {
        auto t = f.read(name).to(at::kFloat);
        if (t.dim() == 4) t = t.flatten(2, 3);
        if (t.dim() != 3 || t.size(0) != 1 || t.size(2) != features)
            throw UsageError(path.string() + ": tensor '" + name + "' has shape " + model::shape_str(t.sizes()) +
                             ", expected [1, tokens, " + std::to_string(features) + "] (one prompt; the connectors' "
                             "caption_channels " + std::to_string(c.caption_channels) + " x text_proj_in_factor " +
                             std::to_string(c.text_proj_in_factor) + "): embeddings of another text encoder?");
        return t;
    };
    auto mask_of = [&](const char * name, const at::Tensor & e) {
        if (!f.contains(name)) return at::ones({e.size(0), e.size(1)}, at::kLong);
        auto m = f.read(name).to(at::kLong);
        if (m.sizes() != at::IntArrayRef({e.size(0), e.size(1)}))
            throw UsageError(path.string() + ": tensor '" + name + "' has shape " + model::shape_str(m.sizes()) +
                             ", expected " + model::shape_str({e.size(0), e.size(1)}) + " (one flag per token)");
        return m;
    };
    if (!f.contains("prompt_embeds"))
        throw UsageError(path.string() + ": no tensor 'prompt_embeds' (LTX2Pipeline's prompt_embeds: the stacked "
                         "Gemma-3 hidden states, [1, tokens, caption_channels x layers]); ddo-host encode writes one");
    PromptEmbeds e;
    e.embeds = embeds_of("prompt_embeds");
    e.mask = mask_of("prompt_attention_mask", e.embeds);
    if (f.contains("negative_prompt_embeds")) {
        e.neg_embeds = embeds_of("negative_prompt_embeds");
        e.neg_mask = mask_of("negative_prompt_attention_mask", *e.neg_embeds);
        if (e.neg_embeds->sizes() != e.embeds.sizes())
            throw UsageError(path.string() + ": negative_prompt_embeds " + model::shape_str(e.neg_embeds->sizes()) +
                             " and prompt_embeds " + model::shape_str(e.embeds.sizes()) +
                             " differ; both are padded to max_sequence_length");
    }
    return e;
}

EngineComponent open_engine_component(model::ModelRun & run, const model::ComponentPlan & plan,
                                      const std::string & folder, std::vector<model::GroupSpec> groups,
                                      at::ScalarType dtype) {
    EngineComponent c;
    c.groups = std::move(groups);
    c.weights = run.open_weights(plan, with_original_names(run.component(folder), folder), c.groups, dtype);
    c.view = std::make_unique<EngineWeights>(*c.weights, c.groups, dtype, plan.placement.device());
    return c;
}

void forecast_engine_component(model::ModelRun & run, const model::ComponentPlan & plan, const std::string & folder,
                               std::vector<model::GroupSpec> groups, at::ScalarType dtype) {
    run.forecast_weights(plan, with_original_names(run.component(folder), folder), std::move(groups), dtype);
}

void unload(model::ModelRun & run, EngineComponent & c) {
    c.view.reset();
    run.unload(std::move(c.weights));
}

Ltx2PromptEncoder open_prompt_encoder(model::ModelRun & run, const ConnectorsConfig & c) {
    auto encoder = Ltx2PromptEncoder::open(run.model_dir(), run.component("text_encoder").file);
    const int64_t want = c.caption_channels * c.text_proj_in_factor;
    if (encoder.features() != want)
        throw RuntimeError((run.model_dir() / "text_encoder" / "config.json").string() + ": hidden_size " +
                           std::to_string(encoder.config().hidden_size) + " x (" +
                           std::to_string(encoder.config().num_layers) + " layers + 1) = " +
                           std::to_string(encoder.features()) + " features, but the connectors read " +
                           std::to_string(want) + "; the text encoder belongs to another checkpoint");
    for (const auto & f : encoder.tokenizer_files()) run.record_input("tokenizer/" + f.filename().string(), f);
    run.add_checkpoint_facts({{"text_encoder_layers", encoder.config().num_layers}, {"text_features", encoder.features()}});
    return encoder;
}

namespace {

// What the embeddings depend on besides Gemma-3's weights (the kit adds those): the server's embeddings cache key.
nlohmann::json embeddings_key(const TextRequest & r) {
    return {{"prompt", r.prompt},
            {"negative_prompt", r.guidance ? nlohmann::json(r.negative.value_or("")) : nlohmann::json(nullptr)},
            {"max_sequence_length", r.max_sequence_length},
            {"dtype", c10::toString(r.dtype)},
            {"device", r.device.str()}};
}

model::NamedTensors embeddings_tensors(const PromptEmbeds & e) {
    model::NamedTensors t{{"embeds", e.embeds}, {"mask", e.mask}};
    if (e.neg_embeds) t.emplace_back("neg_embeds", *e.neg_embeds);
    if (e.neg_mask) t.emplace_back("neg_mask", *e.neg_mask);
    return t;
}

PromptEmbeds embeddings_from(const model::NamedTensors & tensors, const at::Device & device) {
    PromptEmbeds e;
    for (const auto & [name, kept] : tensors) {
        auto t = kept.to(device);
        if (name == "embeds") e.embeds = t;
        else if (name == "mask") e.mask = t;
        else if (name == "neg_embeds") e.neg_embeds = t;
        else if (name == "neg_mask") e.neg_mask = t;
    }
    return e;
}

}  // namespace

std::optional<PromptEmbeds> run_text_stage(model::ModelRun & run, const Ltx2PromptEncoder & encoder,
                                           const TextRequest & r) {
    // Under a server, a prompt encoded before comes from its cache: phase "encode" with no step, Gemma-3 not opened.
    const bool cacheable = !run.dry_run() && !r.encode_only;
    if (cacheable)
        if (auto kept = run.kept_embeddings("text_encoder", embeddings_key(r), "encode")) {
            run.not_used("text_encoder", "the server's embeddings cache held this prompt's embeddings");
            return embeddings_from(*kept, r.device);
        }
    if (r.encode_only) run.not_used_except({"text_encoder"}, "ddo-host encode writes the prompt embeddings only");
    auto te = run.open_weights(run.plan("text_encoder"), encoder.text_encoder(), encoder.groups(), r.dtype);
    if (run.dry_run()) {
        (void)encoder.tokenizer().encode(strip_prompt(r.prompt));  // the prompt tokenizes
        run.unload(std::move(te));
        if (!r.encode_only) return PromptEmbeds{};
        run.log(2, "dry run: checkpoint, tokenizer and text encoder validated; nothing computed");
        return std::nullopt;
    }
    run.begin_phase("encode");
    const bool negative = r.guidance || (r.encode_only && r.negative);
    text::Gemma3Callbacks cb;
    cb.check_interrupted = [&](int layer) { run.check_interrupted("at text encoder layer " + std::to_string(layer)); };
    // One progress count over both prompts' layers (encode_prompt encodes the negative prompt second).
    int done_before = 0, last = 0;
    cb.on_layer = [&](int layer, int total) {
        if (layer <= last) done_before += total;
        last = layer;
        run.step(done_before + layer, total * (negative ? 2 : 1));
    };
    std::optional<std::vector<std::string>> neg;
    if (r.negative) neg = std::vector<std::string>{*r.negative};
    const auto enc = encoder.encode_prompt(*te, {r.prompt}, neg, negative, 1, r.max_sequence_length, r.dtype,
                                           r.device, cb);
    run.unload(std::move(te));  // out of memory before the connectors: owners checked zero
    run.add_checkpoint_facts({{"prompt_tokens", enc.positive.token_counts}});
    PromptEmbeds e{enc.positive.embeds, enc.positive.mask, std::nullopt, std::nullopt};
    if (enc.negative) {
        e.neg_embeds = enc.negative->embeds;
        e.neg_mask = enc.negative->mask;
    }
    if (cacheable) run.keep_embeddings("text_encoder", embeddings_key(r), embeddings_tensors(e));
    if (!r.encode_only) return e;
    run.begin_phase("write_output");
    model::NamedTensors t{{"prompt_embeds", e.embeds}, {"prompt_attention_mask", e.mask}};
    if (e.neg_embeds) {
        t.push_back({"negative_prompt_embeds", *e.neg_embeds});
        t.push_back({"negative_prompt_attention_mask", *e.neg_mask});
    }
    run.write_tensors(t, {{"producer", "ddo-host encode (" + r.plugin + ")"}, {"prompt", r.prompt},
                          {"negative_prompt", r.negative.value_or("")},
                          {"max_sequence_length", std::to_string(r.max_sequence_length)}});
    return std::nullopt;
}

int64_t max_sequence_length(const model::ModelRun & run, const std::string & whose_default) {
    const auto n = run.option<int64_t>("max_sequence_length", 1024);
    if (n < 1)
        throw UsageError("plugin." + run.plugin_name() + ".max_sequence_length must be >= 1 (" + whose_default +
                         "'s default is 1024)");
    return n;
}

std::optional<EngineComponent> open_connectors(model::ModelRun & run, EngineStage connectors, EngineStage transformer,
                                               at::ScalarType dtype, const model::PromptSource & prompt) {
    auto conn = open_engine_component(run, connectors.plan, "connectors", std::move(connectors.groups), dtype);
    if (run.dry_run()) {
        unload(run, conn);
        auto dit = open_engine_component(run, transformer.plan, "transformer", std::move(transformer.groups), dtype);
        unload(run, dit);
        run.log(2, prompt.dry_run_summary());
        return std::nullopt;
    }
    if (run.phase() != "encode") run.begin_phase("encode");  // the text encoder's phase, when it ran
    return conn;
}

}  // namespace ddo::ltx2
