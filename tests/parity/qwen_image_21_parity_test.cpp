// qwen_image_21 parity ladder against diffusers fixtures (tools/reference/qwen_image_21_fixtures.py):
// scheduler -> RoPE -> one block -> whole transformer (with/without KV cache) -> VAE decode (plain, tiled)
// -> VAE encode (plain, tiled, leaf_offload) -> full pipeline from prompt embeddings to pixels; plus route
// equality and checkpoint error messages.
// Tolerances (fp32): scheduler/RoPE 1e-6, transformer outputs 1e-4, VAE pixels 1e-4, VAE latents 1e-4 (see
// VaeEncodePlain), pipeline pixels 1/255.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "block_source.hpp"
#include "checkpoint.hpp"
#include "config.hpp"
#include "cpu_plan.hpp"
#include "ddo/error.hpp"
#include "parity/parity_support.hpp"
#include "pipeline.hpp"
#include "qwen_image_21_run_options.hpp"
#include "scheduler.hpp"
#include "transformer.hpp"
#include "vae_decoder.hpp"
#include "vae_encoder.hpp"

namespace qi = ddo::qwen_image_21;
namespace fs = std::filesystem;
using ddo::test::expect_close;
using ddo::test::max_abs;

namespace {

const fs::path kDir = QI21_FIXTURE_DIR;

const nlohmann::json & reference() { return ddo::test::reference_of(kDir, "qwen_image_21_fixtures"); }

class Qi21Parity : public ::testing::Test {
protected:
    void SetUp() override {
        ddo::test::announce_reference(reference());
    }
};

qi::TensorFile fixture(const std::string & name) { return qi::TensorFile::open_file(kDir / name); }

at::Tensor complex_of(const at::Tensor & real) { return at::view_as_complex(real.contiguous()); }

struct Tiny {
    qi::ModelFiles m = qi::ModelFiles::open(kDir / "checkpoint");
    qi::Transformer transformer{m.transformer_config,
                                qi::load_transformer_globals(m.transformer, m.transformer_config, at::kFloat)};
};

at::Tensor run_all(const Tiny & t, qi::BlockSource & src, const qi::TransformerInputs & in, qi::KvMode mode,
                   std::vector<qi::KvLayerCache> * caches) {
    return t.transformer.forward(in, mode, [&](int64_t i, const at::Tensor & x, const qi::BlockContext & ctx) {
        auto out = qi::run_block(t.m.transformer_config, src.acquire(i), x, ctx, caches ? &(*caches)[i] : nullptr);
        src.release(i);
        return out;
    });
}

// A tiling of reference.json: diffusers' tile_sample_min_height / _width and tile_sample_stride_height / _width.
qi::VaeTiling tiling_of(const nlohmann::json & tj) {
    return {tj.at("tile_sample_min_height").get<int64_t>(), tj.at("tile_sample_min_width").get<int64_t>(),
            tj.at("tile_sample_stride_height").get<int64_t>(), tj.at("tile_sample_stride_width").get<int64_t>()};
}

std::vector<qi::ImageShape> shapes_of(const nlohmann::json & j) {
    std::vector<qi::ImageShape> s;
    for (auto & e : j) s.push_back({e[0].get<int64_t>(), e[1].get<int64_t>(), e[2].get<int64_t>()});
    return s;
}

}  // namespace

TEST_F(Qi21Parity, Scheduler) {
    auto f = fixture("scheduler.safetensors");
    const auto & cases = reference().at("scheduler_cases");
    for (size_t i = 0; i < cases.size(); ++i) {
        const auto & c = cases[i];
        auto cfg = qi::SchedulerConfig::from_json(c.at("config"), "reference.json");
        std::optional<double> mu;
        if (!c.at("mu").is_null()) mu = c.at("mu").get<double>();
        auto s = qi::make_schedule(cfg, c.at("steps").get<int>(), mu);
        const std::string p = "case" + std::to_string(i);
        expect_close(p + ".sigmas", at::tensor(s.sigmas), f.read(p + ".sigmas"), 1e-6);
        expect_close(p + ".timesteps", at::tensor(s.timesteps), f.read(p + ".timesteps"), 1e-4);
    }
    // calculate_shift of the pipeline case (16 tokens) equals the value the reference used.
    auto cfg = qi::SchedulerConfig::from_json(reference().at("scheduler_config"), "reference.json");
    EXPECT_NEAR(qi::calculate_shift(16, cfg), cases[1].at("mu").get<double>(), 1e-12);
}

TEST_F(Qi21Parity, Rope) {
    auto f = fixture("rope.safetensors");
    Tiny t;
    const auto & cases = reference().at("rope_cases");
    for (size_t i = 0; i < cases.size(); ++i) {
        const std::string p = "case" + std::to_string(i);
        auto table = qi::rope_table(t.m.transformer_config, shapes_of(cases[i].at("img_shapes")),
                                    f.read(p + ".image_pad_mask").to(at::kBool));
        expect_close(p + ".rope", at::view_as_real(table), f.read(p + ".table"), 1e-6);
    }
}

TEST_F(Qi21Parity, OneBlock) {
    auto f = fixture("block.safetensors");
    Tiny t;
    auto w = qi::load_transformer_block(t.m.transformer, t.m.transformer_config, 0, at::kFloat);
    qi::BlockContext ctx;
    ctx.modulation = f.read("modulation");
    ctx.rotary = complex_of(f.read("rotary_emb"));
    auto mask = f.read("target_token_mask").to(at::kBool);
    ctx.mod_mask = mask;
    ctx.key_valid = f.read("key_valid").to(at::kBool);
    auto seg = f.read("segments");
    for (int64_t i = 0; i < seg.size(0); ++i)
        ctx.segments.push_back({seg[i][0].item<int64_t>(), seg[i][1].item<int64_t>(), seg[i][2].item<int64_t>() != 0});
    ctx.prefix_len = mask.size(0) - mask.sum().item<int64_t>();
    auto out = qi::run_block(t.m.transformer_config, w, f.read("hidden_states"), ctx, nullptr);
    expect_close("transformer_blocks.0", out, f.read("out"), 1e-4);
}

TEST_F(Qi21Parity, TransformerWithAndWithoutKvCache) {
    auto f = fixture("transformer.safetensors");
    Tiny t;
    auto src = qi::make_resident_blocks(t.m.transformer, t.m.transformer_config, at::kFloat, at::kCPU);
    const auto & cases = reference().at("transformer_cases");
    {
        qi::TransformerInputs in{f.read("t2i.hidden_states"), f.read("t2i.encoder_hidden_states"),
                                 f.read("t2i.timestep"), shapes_of(cases.at("t2i").at("img_shapes")),
                                 f.read("t2i.img_mask").to(at::kBool),
                                 f.read("t2i.encoder_hidden_states_mask").to(at::kBool)};
        expect_close("transformer t2i (batch 2, padded keys)", run_all(t, *src, in, qi::KvMode::off, nullptr),
                     f.read("t2i.out"), 1e-4);
    }
    {
        qi::TransformerInputs in{f.read("cond.hidden_states"), f.read("cond.encoder_hidden_states"),
                                 f.read("cond.timestep"), shapes_of(cases.at("cond").at("img_shapes")),
                                 f.read("cond.img_mask").to(at::kBool), std::nullopt};
        expect_close("transformer with condition image", run_all(t, *src, in, qi::KvMode::off, nullptr),
                     f.read("cond.out"), 1e-4);
    }
    {
        auto shapes = shapes_of(cases.at("kv").at("img_shapes"));
        auto text = f.read("kv.encoder_hidden_states");
        auto img_mask = f.read("kv.img_mask").to(at::kBool);
        auto mask = f.read("kv.encoder_hidden_states_mask").to(at::kBool);
        std::vector<qi::KvLayerCache> cache(size_t(t.m.transformer_config.num_layers));
        qi::TransformerInputs in0{f.read("kv.hidden_states0"), text, f.read("kv.timestep0"), shapes, img_mask, mask};
        expect_close("transformer kv extract", run_all(t, *src, in0, qi::KvMode::extract, &cache),
                     f.read("kv.extract_out"), 1e-4);
        expect_close("kv cache layer 0 keys", cache[0].k, f.read("kv.cache0.k"), 1e-4);
        expect_close("kv cache layer 0 values", cache[0].v, f.read("kv.cache0.v"), 1e-4);
        qi::TransformerInputs in1{f.read("kv.hidden_states1"), text, f.read("kv.timestep1"), shapes, img_mask, mask};
        expect_close("transformer kv cached", run_all(t, *src, in1, qi::KvMode::cached, &cache),
                     f.read("kv.cached_out"), 1e-4);
        expect_close("transformer uncached (same step)", run_all(t, *src, in1, qi::KvMode::off, nullptr),
                     f.read("kv.uncached_out"), 1e-4);
    }
}

TEST_F(Qi21Parity, VaeDecodePlainTiledLeafOffload) {
    auto f = fixture("vae.safetensors");
    Tiny t;
    auto z = f.read("z");
    const auto tiling = tiling_of(reference().at("vae_tiling"));
    qi::VaeDecoder resident(t.m.vae, t.m.vae_config, at::kFloat, at::kCPU, qi::VaeStrategy::resident);
    expect_close("vae decode (resident)", resident.decode(z), f.read("decode"), 1e-4);
    qi::VaeDecoder leaf(t.m.vae, t.m.vae_config, at::kFloat, at::kCPU, qi::VaeStrategy::leaf_offload);
    auto leaf_out = leaf.decode(z);
    expect_close("vae decode (leaf_offload)", leaf_out, f.read("decode"), 1e-4);
    EXPECT_GT(leaf.uploads(), 0u);
    EXPECT_TRUE(at::equal(leaf_out, resident.decode(z))) << "leaf_offload must equal resident bitwise";
    qi::VaeDecoder tiled(t.m.vae, t.m.vae_config, at::kFloat, at::kCPU, qi::VaeStrategy::tiled, tiling);
    expect_close("vae decode (tiled)", tiled.decode(z), f.read("decode_tiled"), 1e-4);
}

// Encoder latents (fp32, O(1): |mode| < 1, normalised < 2 here): ddo calls the reference's ATen kernels in the
// reference's order, so on the fixture machine the error is 0. 1e-4 (the decoder's tolerance) leaves room for
// another CPU / libtorch build picking other conv or reduction kernels, and stays far below what a wrong layer,
// padding side, channel order or blend weight does (the tiled vs plain difference alone is ~0.4).
constexpr double kLatentTol = 1e-4;

TEST_F(Qi21Parity, VaeEncodePlain) {
    auto f = fixture("vae_encode.safetensors");
    Tiny t;
    auto x = f.read("pixels");
    qi::VaeEncoder resident(t.m.vae, t.m.vae_config, at::kFloat, at::kCPU, qi::VaeStrategy::resident);
    auto mode = resident.encode(x);
    EXPECT_FALSE(resident.last_encode_tiled());
    expect_close("vae encode (resident, latent_dist.mode())", mode, f.read("encode"), kLatentTol);
    expect_close("vae encode normalised (QwenImage21Pipeline._encode_vae_image)", resident.encode_normalized(x),
                 f.read("encode_normalized"), kLatentTol);
    // The tiled strategy with diffusers' default 256 px tiles encodes this 96 x 80 image in one piece.
    qi::VaeEncoder fits(t.m.vae, t.m.vae_config, at::kFloat, at::kCPU, qi::VaeStrategy::tiled);
    EXPECT_TRUE(at::equal(fits.encode(x), mode)) << "an image that fits one tile must encode as plain";
    EXPECT_FALSE(fits.last_encode_tiled());

    // A VAE whose channels change between blocks (conv_shortcut, grouped AvgDown / DupUp), batch 2.
    const auto wide_dir = kDir / "vae_wide";
    std::ifstream in(wide_dir / "config.json");
    auto wide_config = qi::VaeConfig::from_json(nlohmann::json::parse(in), wide_dir / "config.json");
    auto wide_file = qi::TensorFile::open_component(wide_dir);
    qi::VaeEncoder wide(wide_file, wide_config, at::kFloat, at::kCPU, qi::VaeStrategy::resident);
    expect_close("vae_wide encode (batch 2, channel changes)", wide.encode(f.read("wide.pixels")),
                 f.read("wide.encode"), kLatentTol);
    qi::VaeDecoder wide_dec(wide_file, wide_config, at::kFloat, at::kCPU, qi::VaeStrategy::resident);
    expect_close("vae_wide decode (batch 2, channel changes)", wide_dec.decode(f.read("wide.z")),
                 f.read("wide.decode"), 1e-4);
}

TEST_F(Qi21Parity, VaeEncodeTiled) {
    auto f = fixture("vae_encode.safetensors");
    Tiny t;
    auto x = f.read("pixels");
    const auto tiling = tiling_of(reference().at("vae_encode_tiling"));
    qi::VaeEncoder tiled(t.m.vae, t.m.vae_config, at::kFloat, at::kCPU, qi::VaeStrategy::tiled, tiling);
    auto got = tiled.encode(x);
    EXPECT_TRUE(tiled.last_encode_tiled()) << "the fixture image is larger than one tile";
    expect_close("vae encode (tiled " + std::to_string(tiling.tile_sample_min_height) + "x" +
                     std::to_string(tiling.tile_sample_min_width) + " every " +
                     std::to_string(tiling.tile_sample_stride_height) + " px)",
                 got, f.read("encode_tiled"), kLatentTol);
    // Tiling changes the result (the seams are blended, not exact): the rung would not notice a silent fallback.
    EXPECT_GT(max_abs(got, f.read("encode")), 100 * kLatentTol);
    // Tile sizes that do not downsample to whole latents are refused up front.
    EXPECT_THROW(qi::VaeEncoder(t.m.vae, t.m.vae_config, at::kFloat, at::kCPU, qi::VaeStrategy::tiled,
                                qi::VaeTiling{64, 40, 32, 32}),
                 ddo::UsageError);
}

TEST_F(Qi21Parity, VaeEncodeLeafOffloadEqualsResident) {
    auto f = fixture("vae_encode.safetensors");
    Tiny t;
    auto x = f.read("pixels");
    qi::VaeEncoder resident(t.m.vae, t.m.vae_config, at::kFloat, at::kCPU, qi::VaeStrategy::resident);
    qi::VaeEncoder leaf(t.m.vae, t.m.vae_config, at::kFloat, at::kCPU, qi::VaeStrategy::leaf_offload);
    auto got = leaf.encode(x);
    expect_close("vae encode (leaf_offload)", got, f.read("encode"), kLatentTol);
    EXPECT_GT(leaf.uploads(), 0u);
    EXPECT_EQ(resident.uploads(), 0u);
    EXPECT_EQ(leaf.weight_bytes(), resident.weight_bytes());
    EXPECT_TRUE(at::equal(got, resident.encode(x))) << "leaf_offload must equal resident bitwise";
    std::cout << "[ parity    ] vae encode leaf_offload == resident bitwise; " << leaf.uploads()
              << " leaf uploads, " << leaf.weight_bytes() << " weight bytes\n";
}

TEST_F(Qi21Parity, PipelineEmbeddingsToPixels) {
    auto f = fixture("pipeline.safetensors");
    Tiny t;
    auto embeds = qi::load_prompt_embeds(kDir / "prompt_embeds.safetensors", t.m.transformer_config.context_in_dim);
    qi::VaeDecoder vae(t.m.vae, t.m.vae_config, at::kFloat, at::kCPU, qi::VaeStrategy::resident);
    auto src = qi::make_resident_blocks(t.m.transformer, t.m.transformer_config, at::kFloat, at::kCPU);
    for (auto & [name, run] : reference().at("pipeline_runs").items()) {
        const qi::PipelineOptions o = ddo::test::qwen_image_21_run_options(run);
        auto latents = qi::denoise(t.m, t.transformer, *src, embeds, o);
        expect_close("pipeline " + name + " latents", latents, f.read(name + ".latents"), 1e-4);
        auto image = qi::decode_latents(t.m, vae, latents, o);
        expect_close("pipeline " + name + " pixels", image, f.read(name + ".image"), 1.0 / 255.0);
    }
}

TEST_F(Qi21Parity, RoutesGiveBitwiseEqualLatents) {
    // Every route runs through the core offload engine (one execution group per block, CPU transport, the
    // linear allocator plugin), against the in-plugin resident reference.
    const ddo_allocator_vtable * linear = ddo::test::linear_allocator(QI21_PLUGIN_DIR);
    ASSERT_NE(linear, nullptr);
    Tiny t;
    auto embeds = qi::load_prompt_embeds(kDir / "prompt_embeds.safetensors", t.m.transformer_config.context_in_dim);
    qi::PipelineOptions o;
    o.width = o.height = 64;
    o.steps = 2;
    o.true_cfg_scale = 3.0;
    auto reference = qi::make_resident_blocks(t.m.transformer, t.m.transformer_config, at::kFloat, at::kCPU);
    auto want = qi::denoise(t.m, t.transformer, *reference, embeds, o);
    const uint64_t one_block = qi::block_payload_bytes(t.m.transformer, t.m.transformer_config, 0);
    struct Case {
        ddo::Route route;
        double resident_gb;
        const char * executed;
    };
    // dynamic: 2 slots and a budget for one block -> one block resident, the other streamed through the slots.
    // Margin for the GiB round trip and the layout's padding (256-byte slots, + the file alignment mod 64 on the host).
    const double one_block_gb = double(one_block + 16384) / 1073741824.0;
    for (const Case & k : {Case{ddo::Route::resident, 0, "resident"}, Case{ddo::Route::component, 0, "component"},
                           Case{ddo::Route::dynamic, one_block_gb, "dynamic"},
                           Case{ddo::Route::disk, 0, "disk"}, Case{ddo::Route::group_block, 0, "group_block"},
                           Case{ddo::Route::group_leaf, 0, "group_leaf"}}) {
        const auto plan = ddo::test::cpu_plan("transformer", k.route, linear, k.resident_gb);
        auto src = qi::make_engine_blocks(kDir / "checkpoint" / "transformer", t.m.transformer_config, at::kFloat, plan);
        auto got = qi::denoise(t.m, t.transformer, *src, embeds, o);
        EXPECT_EQ(src->finish(), 0u) << k.executed;
        const auto rep = src->report();
        EXPECT_EQ(src->route(), k.executed);
        EXPECT_TRUE(at::equal(want, got)) << k.executed << " route differs from the resident reference";
        const bool in_place = k.route == ddo::Route::resident || k.route == ddo::Route::component;
        if (in_place)  // Note [Mapped residents]: on the CPU the resident groups are the file mapping, not copies
            EXPECT_GT(rep.at("engine").at("counters").at("mapped_bytes").get<uint64_t>(), 0u) << rep.dump();
        else
            EXPECT_GT(src->bytes_streamed(), 0u) << k.executed;
        const auto & c = rep.at("engine").at("counters").at("bytes_moved");
        if (k.route == ddo::Route::dynamic) {  // its resident group is read in place, the other streamed
            EXPECT_GT(rep.at("engine").at("counters").at("mapped_bytes").get<uint64_t>(), 0u) << rep.dump();
            EXPECT_EQ(c.at("resident").get<uint64_t>(), 0u) << rep.dump();
            EXPECT_GT(c.at("pinned").get<uint64_t>() + c.at("pageable").get<uint64_t>(), 0u)
                << rep.dump();
        }
        if (k.route == ddo::Route::disk) {
            EXPECT_GT(c.at("file").get<uint64_t>(), 0u) << rep.dump();
        }
        std::cout << "[ routes    ] engine " << k.executed << " == resident reference bitwise; groups "
                  << rep.at("execution_groups") << ", bytes moved " << src->bytes_streamed() << "\n";
    }
}

namespace {

fs::path copy_checkpoint(const std::string & tag) {
    auto dst = fs::temp_directory_path() / ("qi21_bad_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(dst);
    fs::copy(kDir / "checkpoint", dst, fs::copy_options::recursive);
    return dst;
}

void edit_config(const fs::path & file, const std::string & key, const nlohmann::json & value) {
    nlohmann::json j;
    {
        std::ifstream in(file);
        j = nlohmann::json::parse(in);
    }
    j[key] = value;
    std::ofstream(file) << j.dump(2);
}

std::string open_error(const fs::path & dir) {
    try {
        qi::ModelFiles::open(dir);
    } catch (const ddo::RuntimeError & e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_F(Qi21Parity, CheckpointErrorsNameTensorAndFile) {
    {  // config asks for more blocks than the weights hold -> missing tensor
        auto d = copy_checkpoint("missing");
        edit_config(d / "transformer/config.json", "num_layers", 3);
        auto msg = open_error(d);
        std::cout << "  missing: " << msg << "\n";
        EXPECT_NE(msg.find("transformer_blocks.2.attn.to_q.weight"), std::string::npos) << msg;
        EXPECT_NE(msg.find(d.string()), std::string::npos) << msg;
        fs::remove_all(d);
    }
    {  // fewer blocks than the weights -> unexpected tensor: config contradicts weights
        auto d = copy_checkpoint("extra");
        edit_config(d / "transformer/config.json", "num_layers", 1);
        auto msg = open_error(d);
        std::cout << "  contradiction: " << msg << "\n";
        EXPECT_NE(msg.find("transformer_blocks.1."), std::string::npos) << msg;
        EXPECT_NE(msg.find("diffusion_pytorch_model.safetensors"), std::string::npos) << msg;
        fs::remove_all(d);
    }
    {  // wrong shape
        auto d = copy_checkpoint("shape");
        edit_config(d / "transformer/config.json", "context_in_dim", 24);
        auto msg = open_error(d);
        std::cout << "  shape: " << msg << "\n";
        EXPECT_NE(msg.find("txt_in."), std::string::npos) << msg;
        EXPECT_NE(msg.find("shape"), std::string::npos) << msg;
        fs::remove_all(d);
    }
    {  // wrong dtype: rewrite one header entry F32 -> I32 (same size, same offsets)
        auto d = copy_checkpoint("dtype");
        auto file = d / "transformer/diffusion_pytorch_model.safetensors";
        std::string bytes;
        {
            std::ifstream in(file, std::ios::binary);
            bytes.assign(std::istreambuf_iterator<char>(in), {});
        }
        const std::string key = "\"proj_out.weight\":{\"dtype\":\"F32\"";
        auto pos = bytes.find(key);
        ASSERT_NE(pos, std::string::npos) << "fixture header layout changed";
        bytes.replace(pos + key.size() - 4, 3, "I32");
        std::ofstream(file, std::ios::binary) << bytes;
        auto msg = open_error(d);
        std::cout << "  dtype: " << msg << "\n";
        EXPECT_NE(msg.find("proj_out.weight"), std::string::npos) << msg;
        EXPECT_NE(msg.find("I32"), std::string::npos) << msg;
        EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
        fs::remove_all(d);
    }
}

namespace {

// Replaces `from` by `to` (same length) in a safetensors file's header, so every data offset stays valid.
void patch_header(const fs::path & file, const std::string & from, const std::string & to) {
    ASSERT_EQ(from.size(), to.size());
    std::string bytes;
    {
        std::ifstream in(file, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    auto pos = bytes.find(from);
    ASSERT_NE(pos, std::string::npos) << "fixture header layout changed: " << from;
    bytes.replace(pos, from.size(), to);
    std::ofstream(file, std::ios::binary) << bytes;
}

// The error (exit 4) constructing one VAE half on the checkpoint at `dir`, or "" when it loads. Opens only the
// VAE component: ModelFiles::open would refuse a broken decoder half before the encoder is asked.
template <class Half>
std::string vae_error(const fs::path & dir) {
    const fs::path cfg = dir / "vae" / "config.json";
    std::ifstream in(cfg);
    const auto vae_config = qi::VaeConfig::from_json(nlohmann::json::parse(in), cfg);
    const auto vae = qi::TensorFile::open_component(dir / "vae");
    try {
        Half(vae, vae_config, at::kFloat, at::kCPU, qi::VaeStrategy::resident);
    } catch (const ddo::RuntimeError & e) {
        EXPECT_EQ(e.code(), ddo::ExitCode::runtime);
        return e.what();
    }
    return "";
}

}  // namespace

TEST_F(Qi21Parity, VaeEncoderCheckpointErrorsNameTensorAndFile) {
    EXPECT_EQ(vae_error<qi::VaeEncoder>(kDir / "checkpoint"), "");
    {  // missing: the header names another tensor instead of encoder.conv_out.weight
        auto d = copy_checkpoint("enc_missing");
        const auto file = d / "vae/diffusion_pytorch_model.safetensors";
        patch_header(file, "\"encoder.conv_out.weight\"", "\"encoder.conv_out.weighx\"");
        auto msg = vae_error<qi::VaeEncoder>(d);
        std::cout << "  encoder missing: " << msg << "\n";
        EXPECT_NE(msg.find("'encoder.conv_out.weight' is missing"), std::string::npos) << msg;
        EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
        // The decoder does not need it, but refuses the tensor no config of this VAE has.
        auto dmsg = vae_error<qi::VaeDecoder>(d);
        std::cout << "  decoder, unknown encoder tensor: " << dmsg << "\n";
        EXPECT_NE(dmsg.find("unexpected tensor 'encoder.conv_out.weighx'"), std::string::npos) << dmsg;
        EXPECT_NE(dmsg.find(file.string()), std::string::npos) << dmsg;
        // ... and so does opening the checkpoint for a run (the decoder half is validated there, before denoising).
        const auto omsg = open_error(d);
        EXPECT_NE(omsg.find("unexpected tensor 'encoder.conv_out.weighx'"), std::string::npos) << omsg;
        fs::remove_all(d);
    }
    {  // wrong shape: base_dim (encoder only) contradicts the encoder weights; the decoder still loads
        auto d = copy_checkpoint("enc_shape");
        edit_config(d / "vae/config.json", "base_dim", 8);
        auto msg = vae_error<qi::VaeEncoder>(d);
        std::cout << "  encoder shape: " << msg << "\n";
        EXPECT_NE(msg.find("tensor 'encoder."), std::string::npos) << msg;
        EXPECT_NE(msg.find("has shape"), std::string::npos) << msg;
        EXPECT_NE(msg.find("diffusion_pytorch_model.safetensors"), std::string::npos) << msg;
        EXPECT_EQ(vae_error<qi::VaeDecoder>(d), "");
        fs::remove_all(d);
    }
    {  // wrong dtype: quant_conv.weight F32 -> I32 (same size, same offsets)
        auto d = copy_checkpoint("enc_dtype");
        const auto file = d / "vae/diffusion_pytorch_model.safetensors";
        patch_header(file, "\"quant_conv.weight\":{\"dtype\":\"F32\"", "\"quant_conv.weight\":{\"dtype\":\"I32\"");
        auto msg = vae_error<qi::VaeEncoder>(d);
        std::cout << "  encoder dtype: " << msg << "\n";
        EXPECT_NE(msg.find("'quant_conv.weight' has dtype I32"), std::string::npos) << msg;
        EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
        fs::remove_all(d);
    }
}
