// LTX-2 DiT + text connectors parity ladder against diffusers fixtures (tools/reference/ltx2_dit_fixtures.py):
// RoPE coordinates and tables (split / interleaved x fp64 / fp32 base; video, audio, cross-modal, connector 1-D)
// -> AdaLN-single -> one block (2.0 flags; 2.3 flags with STG) -> whole DiT (default RoPE, padded text mask,
// per-token timesteps, 2.3 with coords, isolate_modalities, STG mixed / default mask) -> text connectors (2.0 / 2.3,
// registers on / off); plus scope coverage of the execution groups, and checkpoint / config error messages.
// Tolerances (fp32): RoPE coordinates and tables 1e-6, AdaLN-single 1e-5, blocks, transformer and connector
// outputs 1e-4.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "connectors.hpp"
#include "ddo/error.hpp"
#include "ddo/model/tensor_file.hpp"
#include "parity/parity_support.hpp"
#include "rope.hpp"
#include "transformer.hpp"
#include "transformer_config.hpp"
#include "weights.hpp"

namespace lt = ddo::ltx2;
namespace fs = std::filesystem;
using ddo::model::TensorFile;

namespace {

const fs::path kDir = LTX2_DIT_FIXTURE_DIR;
constexpr double kRopeTol = 1e-6;
constexpr double kAdaLnTol = 1e-5;
constexpr double kOutTol = 1e-4;

using ddo::test::error_of;
using ddo::test::expect_close;

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, "ltx2_dit_fixtures"); }

class Ltx2DitParity : public ddo::test::ParitySuite {
protected:
    Ltx2DitParity() : ParitySuite(kDir, "ltx2_dit_fixtures") {}
};

TensorFile fixture(const std::string & name) { return TensorFile::open_file(kDir / name); }

// A tiny checkpoint folder of the fixtures: config (a Config::from_file) + weights, resident fp32 on the CPU.
template <class Config>
struct Tiny {
    explicit Tiny(const std::string & name)
        : config(Config::from_file(kDir / name / "config.json")), file(TensorFile::open_component(kDir / name)),
          w(file, at::kFloat, at::kCPU) {}
    Config config;
    TensorFile file;
    lt::ResidentWeights w;
};
using Dit = Tiny<lt::TransformerConfig>;
using Connectors = Tiny<lt::ConnectorsConfig>;

// Resident weights that, like EngineWeights, only hand out a tensor while a scope naming its execution group is
// open: the forward's scopes must cover every tensor it reads. Counts the tensors read.
class ScopeCheckingWeights final : public lt::Weights {
public:
    ScopeCheckingWeights(lt::Weights & inner, const std::vector<ddo::model::GroupSpec> & groups) : inner_(inner) {
        for (const auto & g : groups)
            for (const auto & t : g.tensors) group_of_[t] = g.name;
    }
    at::Tensor get(const std::string & name) override {
        const auto it = group_of_.find(name);
        EXPECT_NE(it, group_of_.end()) << name << " is in no execution group";
        if (it != group_of_.end()) {
            EXPECT_TRUE(open_.count(it->second)) << name << " read outside scope " << it->second;
        }
        read_.insert(name);
        return inner_.get(name);
    }
    bool contains(const std::string & name) const override { return inner_.contains(name); }
    at::Device device() const override { return inner_.device(); }
    at::ScalarType dtype() const override { return inner_.dtype(); }
    const std::set<std::string> & read() const { return read_; }

protected:
    void enter(const std::string & module) override { open_.insert(module); }
    void leave(const std::string & module) override { open_.erase(module); }

private:
    lt::Weights & inner_;
    std::map<std::string, std::string> group_of_;
    std::multiset<std::string> open_;
    std::set<std::string> read_;
};

lt::RopeTables tables(const TensorFile & f, const std::string & p, lt::RopeType type) {
    return {f.read(p + ".cos"), f.read(p + ".sin"), type};
}

std::optional<at::Tensor> maybe(const TensorFile & f, const std::string & name) {
    if (!f.contains(name)) return std::nullopt;
    return f.read(name);
}

std::string model_of(const std::string & transformer_case) {
    if (transformer_case == "default") return "dit_default";
    return transformer_case.rfind("dit23", 0) == 0 ? "dit23" : "dit20";
}

lt::TransformerInputs inputs_of(const TensorFile & f, const std::string & p, const nlohmann::json & scalars) {
    lt::TransformerInputs in;
    in.hidden_states = f.read(p + ".hidden_states");
    in.audio_hidden_states = f.read(p + ".audio_hidden_states");
    in.encoder_hidden_states = f.read(p + ".encoder_hidden_states");
    in.audio_encoder_hidden_states = f.read(p + ".audio_encoder_hidden_states");
    in.timestep = f.read(p + ".timestep");
    in.audio_timestep = maybe(f, p + ".audio_timestep");
    in.sigma = maybe(f, p + ".sigma");
    in.audio_sigma = maybe(f, p + ".audio_sigma");
    in.encoder_attention_mask = maybe(f, p + ".encoder_attention_mask");
    in.audio_encoder_attention_mask = maybe(f, p + ".audio_encoder_attention_mask");
    in.video_coords = maybe(f, p + ".video_coords");
    in.audio_coords = maybe(f, p + ".audio_coords");
    in.perturbation_mask = maybe(f, p + ".perturbation_mask");
    if (scalars.contains("num_frames")) {
        in.num_frames = scalars.at("num_frames").get<int64_t>();
        in.height = scalars.at("height").get<int64_t>();
        in.width = scalars.at("width").get<int64_t>();
        in.audio_num_frames = scalars.at("audio_num_frames").get<int64_t>();
    }
    in.fps = scalars.value("fps", 24.0);
    in.isolate_modalities = scalars.value("isolate_modalities", false);
    in.use_cross_timestep = scalars.value("use_cross_timestep", false);
    in.spatio_temporal_guidance_blocks = scalars.value("spatio_temporal_guidance_blocks", std::vector<int64_t>{});
    return in;
}

void expect_mentions(const std::string & msg, const std::vector<std::string> & parts) {
    std::cout << "[ message   ] " << msg << "\n";
    for (const auto & p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

}  // namespace

TEST_F(Ltx2DitParity, RopeCoordinatesAndTables) {
    auto f = fixture("rope.safetensors");
    const auto & g = reference().at("grid");
    const int64_t b = g.at("batch"), nf = g.at("num_frames"), h = g.at("height"), w = g.at("width");
    const int64_t na = g.at("audio_num_frames"), l = g.at("text_len");
    const double fps = g.at("fps");
    for (const auto & name : {"split_f64", "split_f32", "interleaved_f64", "interleaved_f32"}) {
        const std::string n = name;
        const auto c = lt::TransformerConfig::from_json(reference().at("rope_cases").at(n).at("config"),
                                                        kDir / "reference.json");
        auto vc = lt::video_coords(c, b, nf, h, w, fps, at::kCPU);
        auto ac = lt::audio_coords(c, b, na, at::kCPU);
        expect_close(n + " video coords", vc, f.read(n + ".video_coords"), kRopeTol);
        expect_close(n + " audio coords", ac, f.read(n + ".audio_coords"), kRopeTol);
        const std::pair<std::string, lt::RopeTables> got[] = {
            {"video", lt::rope_tables(lt::video_rope(c), vc)},
            {"audio", lt::rope_tables(lt::audio_rope(c), ac)},
            {"cross_video", lt::rope_tables(lt::cross_video_rope(c), vc.slice(1, 0, 1))},
            {"cross_audio", lt::rope_tables(lt::cross_audio_rope(c), ac.slice(1, 0, 1))},
        };
        for (const auto & [part, t] : got) {
            expect_close(n + " " + part + " cos", t.cos, f.read(n + "." + part + ".cos"), kRopeTol);
            expect_close(n + " " + part + " sin", t.sin, f.read(n + "." + part + ".sin"), kRopeTol);
        }
    }
    for (const auto & type : {"split", "interleaved"}) {
        const std::string n = std::string("conn_") + type;
        const auto c = lt::ConnectorsConfig::from_json(reference().at("rope_cases").at(n).at("config"),
                                                       kDir / "reference.json");
        auto t = lt::connector_rope_tables(lt::connector_rope(c, true), b, l, double(c.rope_base_seq_len), at::kCPU);
        expect_close(n + " connector rope cos", t.cos, f.read(n + ".cos"), kRopeTol);
        expect_close(n + " connector rope sin", t.sin, f.read(n + ".sin"), kRopeTol);
    }
}

TEST_F(Ltx2DitParity, AdaLayerNormSingle) {
    auto f = fixture("adaln.safetensors");
    std::map<std::string, std::unique_ptr<Dit>> models;
    int cases = 0;
    for (const auto & name : f.names()) {
        const std::string suffix = ".temb";
        if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
            continue;
        const std::string p = name.substr(0, name.size() - suffix.size());
        const std::string model = p.substr(0, p.find('.')), module = p.substr(p.find('.') + 1);
        auto & m = models[model];
        if (!m) m = std::make_unique<Dit>(model);
        auto [temb, emb] = lt::adaln_single(m->w, module, f.read(p + ".timestep"));
        expect_close(p + " temb", temb, f.read(p + ".temb"), kAdaLnTol);
        expect_close(p + " embedded_timestep", emb, f.read(p + ".embedded"), kAdaLnTol);
        ++cases;
    }
    EXPECT_EQ(cases, 10);
}

TEST_F(Ltx2DitParity, OneBlock) {
    auto f = fixture("block.safetensors");
    for (const auto & [name, info] : reference().at("block_cases").items()) {
        Dit m(name);
        const std::string p = name + ".in.";
        const auto type = m.config.rope_type;
        lt::TransformerState s;
        s.x = f.read(p + "hidden_states");
        s.a = f.read(p + "audio_hidden_states");
        s.text = f.read(p + "encoder_hidden_states");
        s.audio_text = f.read(p + "audio_encoder_hidden_states");
        s.text_mask = maybe(f, p + "encoder_attention_mask");
        s.audio_text_mask = maybe(f, p + "audio_encoder_attention_mask");
        s.temb = f.read(p + "temb");
        s.temb_audio = f.read(p + "temb_audio");
        s.temb_ca_scale_shift = f.read(p + "temb_ca_scale_shift");
        s.temb_ca_audio_scale_shift = f.read(p + "temb_ca_audio_scale_shift");
        s.temb_ca_gate = f.read(p + "temb_ca_gate");
        s.temb_ca_audio_gate = f.read(p + "temb_ca_audio_gate");
        s.temb_prompt = maybe(f, p + "temb_prompt");
        s.temb_prompt_audio = maybe(f, p + "temb_prompt_audio");
        s.video_rope = tables(f, p + "video_rotary_emb", type);
        s.audio_rope = tables(f, p + "audio_rotary_emb", type);
        s.cross_video_rope = tables(f, p + "ca_video_rotary_emb", type);
        s.cross_audio_rope = tables(f, p + "ca_audio_rotary_emb", type);
        s.use_a2v = info.at("use_a2v").get<bool>();
        s.use_v2a = info.at("use_v2a").get<bool>();
        const int64_t block = info.at("block").get<int64_t>();
        if (auto pm = maybe(f, p + "perturbation_mask")) {
            s.stg_blocks = {block};
            s.perturbation = lt::Perturbation{*pm, info.at("all_perturbed").get<bool>()};
        }
        lt::run_block(m.config, m.w, block, s);
        expect_close(name + " block " + std::to_string(block) + " video", s.x, f.read(name + ".out.video"), kOutTol);
        expect_close(name + " block " + std::to_string(block) + " audio", s.a, f.read(name + ".out.audio"), kOutTol);
    }
}

TEST_F(Ltx2DitParity, WholeTransformer) {
    auto f = fixture("transformer.safetensors");
    for (const auto & [name, scalars] : reference().at("transformer_cases").items()) {
        Dit m(model_of(name));
        auto [video, audio] = lt::forward(m.config, m.w, inputs_of(f, name + ".in", scalars));
        expect_close("transformer " + name + " video velocity", video, f.read(name + ".out.video"), kOutTol);
        expect_close("transformer " + name + " audio velocity", audio, f.read(name + ".out.audio"), kOutTol);
    }
}

TEST_F(Ltx2DitParity, TextConnectors) {
    auto f = fixture("connectors.safetensors");
    for (const auto & [name, info] : reference().at("connector_cases").items()) {
        Connectors m(name);
        auto out = lt::connectors_forward(m.config, m.w, f.read(name + ".in.hidden"), f.read(name + ".in.mask"));
        expect_close("connectors " + name + " video", out.video, f.read(name + ".out.video"), kOutTol);
        expect_close("connectors " + name + " audio", out.audio, f.read(name + ".out.audio"), kOutTol);
        EXPECT_TRUE(at::equal(out.mask, f.read(name + ".out.mask"))) << name << " mask";
    }
}

// The engine route reads a tensor only inside the scope of its execution group: every tensor the forward reads is
// covered, and the groups hold exactly the checkpoint's tensors.
TEST_F(Ltx2DitParity, ExecutionGroupsCoverTheForward) {
    auto f = fixture("transformer.safetensors");
    for (const std::string name : {"dit23_stg_mixed", "dit20_mask"}) {
        Dit m(model_of(name));
        const auto groups = lt::transformer_groups(m.config);
        ASSERT_EQ(groups.size(), size_t(m.config.num_layers + 1));
        EXPECT_EQ(groups[0].name, "globals");
        EXPECT_EQ(groups[1].name, "transformer_blocks.0");
        std::set<std::string> all;
        for (const auto & g : groups)
            for (const auto & t : g.tensors) EXPECT_TRUE(all.insert(t).second) << t << " in two groups";
        const auto names = m.file.names();
        EXPECT_EQ(all, std::set<std::string>(names.begin(), names.end()));
        ScopeCheckingWeights w(m.w, groups);
        auto [video, audio] = lt::forward(m.config, w, inputs_of(f, name + ".in",
                                                                 reference().at("transformer_cases").at(name)));
        expect_close("scoped " + name + " video velocity", video, f.read(name + ".out.video"), kOutTol);
        EXPECT_EQ(w.read(), all) << "the forward reads every tensor of the checkpoint";
    }
    auto fc = fixture("connectors.safetensors");
    for (const std::string name : {"conn20_reg", "conn23_reg", "conn23_noreg"}) {
        Connectors m(name);
        const auto groups = lt::connector_groups(m.config);
        std::set<std::string> all;
        for (const auto & g : groups)
            for (const auto & t : g.tensors) EXPECT_TRUE(all.insert(t).second) << t << " in two groups";
        const auto names = m.file.names();
        EXPECT_EQ(all, std::set<std::string>(names.begin(), names.end()));
        ScopeCheckingWeights w(m.w, groups);
        auto out = lt::connectors_forward(m.config, w, fc.read(name + ".in.hidden"), fc.read(name + ".in.mask"));
        expect_close("scoped connectors " + name + " video", out.video, fc.read(name + ".out.video"), kOutTol);
        EXPECT_EQ(w.read(), all);
    }
}

// The same code in bf16 (the CUDA compute dtype; here on the CPU): runs every path and stays near the fp32
// reference (bf16 keeps 8 mantissa bits: tolerance 5% of the output's range).
TEST_F(Ltx2DitParity, Bf16RunsNearTheReference) {
    auto f = fixture("transformer.safetensors");
    for (const std::string name : {"dit23_stg_mixed", "dit20_mask"}) {
        Dit m(model_of(name));
        lt::ResidentWeights w(m.file, at::kBFloat16, at::kCPU);
        auto [video, audio] = lt::forward(m.config, w, inputs_of(f, name + ".in",
                                                                 reference().at("transformer_cases").at(name)));
        EXPECT_EQ(video.scalar_type(), at::kBFloat16);
        const auto want = f.read(name + ".out.video");
        expect_close("bf16 " + name + " video velocity", video, want, 0.05 * want.abs().max().item<double>());
    }
    auto fc = fixture("connectors.safetensors");
    for (const std::string name : {"conn20_reg", "conn23_noreg"}) {
        Connectors m(name);
        lt::ResidentWeights w(m.file, at::kBFloat16, at::kCPU);
        auto out = lt::connectors_forward(m.config, w, fc.read(name + ".in.hidden"), fc.read(name + ".in.mask"));
        const auto want = fc.read(name + ".out.video");
        expect_close("bf16 connectors " + name + " video", out.video, want, 0.05 * want.abs().max().item<double>());
    }
}

TEST_F(Ltx2DitParity, CheckpointsValidate) {
    for (const std::string name : {"dit20", "dit23", "dit_default"}) {
        Dit m(name);
        EXPECT_NO_THROW(lt::validate_transformer(m.file, m.config)) << name;
        EXPECT_EQ(lt::tensor_specs(m.config).size(), m.file.names().size()) << name;
    }
    for (const std::string name : {"conn20_reg", "conn20_noreg", "conn23_reg", "conn23_noreg"}) {
        Connectors m(name);
        EXPECT_NO_THROW(lt::validate_connectors(m.file, m.config)) << name;
    }
}

TEST_F(Ltx2DitParity, CheckpointErrorsNameTensorAndFile) {
    const auto c20 = lt::TransformerConfig::from_file(kDir / "dit20" / "config.json");
    const auto c23 = lt::TransformerConfig::from_file(kDir / "dit23" / "config.json");
    expect_mentions(error_of([&] { lt::validate_transformer(TensorFile::open_component(kDir / "broken_missing"), c20); }),
                    {"runtime: ", "transformer_blocks.1.attn2.to_k.weight", "broken_missing", "missing"});
    expect_mentions(error_of([&] { lt::validate_transformer(TensorFile::open_component(kDir / "broken_shape"), c20); }),
                    {"runtime: ", "'scale_shift_table'", "broken_shape", "[3, 16]"});
    // A 2.0 config over 2.3 weights: the first tensor the 2.0 config implies that 2.3 lacks.
    expect_mentions(error_of([&] { lt::validate_transformer(TensorFile::open_component(kDir / "dit23"), c20); }),
                    {"runtime: ", "caption_projection.linear_1.weight", "dit23"});
    // And the other way round: 2.3 modulation tables are larger than 2.0's.
    expect_mentions(error_of([&] { lt::validate_transformer(TensorFile::open_component(kDir / "dit20"), c23); }),
                    {"runtime: ", "time_embed.linear.weight", "dit20"});
    // Weights the config does not imply: a 2.0 connectors config over a 2.0 checkpoint without registers.
    const auto reg = lt::ConnectorsConfig::from_file(kDir / "conn20_reg" / "config.json");
    const auto noreg = lt::ConnectorsConfig::from_file(kDir / "conn20_noreg" / "config.json");
    expect_mentions(error_of([&] { lt::validate_connectors(TensorFile::open_component(kDir / "conn20_noreg"), reg); }),
                    {"runtime: ", "video_connector.learnable_registers", "conn20_noreg"});
    expect_mentions(error_of([&] { lt::validate_connectors(TensorFile::open_component(kDir / "conn20_reg"), noreg); }),
                    {"runtime: ", "unexpected tensor", "_connector.learnable_registers", "conn20_reg"});
    expect_mentions(error_of([&] { lt::validate_connectors(TensorFile::open_component(kDir / "conn23_reg"), reg); }),
                    {"runtime: ", "text_proj_in.weight", "conn23_reg"});
}

TEST_F(Ltx2DitParity, ConfigErrorsNameFileAndKey) {
    auto dit = nlohmann::json::parse(std::ifstream(kDir / "dit20" / "config.json"));
    auto conn = nlohmann::json::parse(std::ifstream(kDir / "conn23_reg" / "config.json"));
    const fs::path file = "transformer/config.json";
    auto with = [](nlohmann::json j, const std::string & k, nlohmann::json v) {
        j[k] = std::move(v);
        return j;
    };
    expect_mentions(error_of([&] { lt::TransformerConfig::from_json(with(dit, "rope_type", "rotary"), file); }),
                    {"usage: ", "transformer/config.json", "'rope_type'", "rotary"});
    expect_mentions(error_of([&] { lt::TransformerConfig::from_json(with(dit, "qk_norm", "rms_norm"), file); }),
                    {"usage: ", "transformer/config.json", "'qk_norm'"});
    expect_mentions(error_of([&] { lt::TransformerConfig::from_json(with(dit, "audio_cross_attention_dim", 12), file); }),
                    {"usage: ", "'audio_cross_attention_dim'"});
    expect_mentions(error_of([&] { lt::TransformerConfig::from_json(with(dit, "num_layers", "two"), file); }),
                    {"usage: ", "'num_layers'", "wrong type"});
    expect_mentions(error_of([&] { lt::ConnectorsConfig::from_json(with(conn, "rope_type", "rotary"), "connectors/config.json"); }),
                    {"usage: ", "connectors/config.json", "'rope_type'"});
    expect_mentions(error_of([&] { lt::ConnectorsConfig::from_json(with(conn, "video_hidden_dim", 32), "connectors/config.json"); }),
                    {"usage: ", "connectors/config.json", "'video_connector_num_attention_heads'", "video_hidden_dim"});
}
