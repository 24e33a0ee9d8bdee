#include "qwen3_vision_model.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"
#include "text_tower.hpp"

namespace ddo::text {
namespace {

using nlohmann::json;

[[noreturn]] void bad_config(const std::filesystem::path & f, const std::string & key, const std::string & what) {
    throw UsageError(f.string() + ": " + key + " " + what +
                     "; this is not a Qwen3-VL vision tower config ddo can run (expected the config.json that "
                     "transformers' save_pretrained writes for Qwen3VLForConditionalGeneration)");
}

std::int64_t get_int(const json & j, const std::filesystem::path & f, const std::string & key) {
    if (!j.contains(key) || !j.at(key).is_number_integer())
        bad_config(f, "vision_config." + key, "is missing or not an integer");
    const auto v = j.at(key).get<std::int64_t>();
    if (v <= 0) bad_config(f, "vision_config." + key, "must be positive");
    return v;
}

// One tensor of the tower: its group (0 patch embed, 1 + i block i, depth + 1 the mergers), checkpoint name
// (without the prefix) and shape.
struct TensorSpec {
    std::size_t group;
    std::string name;
    std::vector<std::int64_t> shape;
};

std::vector<TensorSpec> tower_tensors(const Qwen3VisionConfig & c) {
    const std::int64_t h = c.hidden_size, m = c.hidden_size * c.spatial_merge_size * c.spatial_merge_size;
    std::vector<TensorSpec> t = {
        {0, "patch_embed.proj.weight", {h, c.in_channels, c.temporal_patch_size, c.patch_size, c.patch_size}},
        {0, "patch_embed.proj.bias", {h}},
        {0, "pos_embed.weight", {c.num_position_embeddings, h}}};
    for (std::int64_t i = 0; i < c.depth; ++i) {
        const std::size_t g = std::size_t(i + 1);
        const std::string b = "blocks." + std::to_string(i) + ".";
        for (const char * n : {"norm1", "norm2"}) {
            t.push_back({g, b + n + ".weight", {h}});
            t.push_back({g, b + n + ".bias", {h}});
        }
        t.push_back({g, b + "attn.qkv.weight", {3 * h, h}});
        t.push_back({g, b + "attn.qkv.bias", {3 * h}});
        t.push_back({g, b + "attn.proj.weight", {h, h}});
        t.push_back({g, b + "attn.proj.bias", {h}});
        t.push_back({g, b + "mlp.linear_fc1.weight", {c.intermediate_size, h}});
        t.push_back({g, b + "mlp.linear_fc1.bias", {c.intermediate_size}});
        t.push_back({g, b + "mlp.linear_fc2.weight", {h, c.intermediate_size}});
        t.push_back({g, b + "mlp.linear_fc2.bias", {h}});
    }
    const std::size_t last = std::size_t(c.depth + 1);
    const auto merger = [&](const std::string & p, std::int64_t norm) {
        t.push_back({last, p + "norm.weight", {norm}});
        t.push_back({last, p + "norm.bias", {norm}});
        t.push_back({last, p + "linear_fc1.weight", {m, m}});
        t.push_back({last, p + "linear_fc1.bias", {m}});
        t.push_back({last, p + "linear_fc2.weight", {c.out_hidden_size, m}});
        t.push_back({last, p + "linear_fc2.bias", {c.out_hidden_size}});
    };
    merger("merger.", h);  // use_postshuffle_norm=False: the norm is over one patch
    for (std::size_t k = 0; k < c.deepstack_visual_indexes.size(); ++k)
        merger("deepstack_merger_list." + std::to_string(k) + ".", m);  // use_postshuffle_norm=True
    return t;
}

at::Tensor layer_norm(const at::Tensor & x, const model::GroupTensors & t, const std::string & p) {
    return at::layer_norm(x, {x.size(-1)}, t.at(p + ".weight"), t.at(p + ".bias"), 1e-6);
}

// Qwen3VLVisionPatchMerger: post-shuffle norm (deepstack) or pre-shuffle norm (the merger), the 2 x 2 shuffle as a
// view of merge^2 consecutive patches, linear_fc1, exact GELU (nn.GELU), linear_fc2.
at::Tensor patch_merger(const at::Tensor & x, const model::GroupTensors & t, const std::string & p, std::int64_t m,
                        bool postshuffle_norm) {
    auto y = postshuffle_norm ? layer_norm(x.view({-1, m}), t, p + "norm") : layer_norm(x, t, p + "norm").view({-1, m});
    y = at::gelu(t.linear(p + "linear_fc1", true)(y));
    return t.linear(p + "linear_fc2", true)(y);
}

// _interpolation_axis_taps_weights (bilinear, align_corners, border padding): the two taps into a `side`-long
// table and their weights for target positions `index` on axes of lengths `size` (both [N], int64), with the
// reference's float32 arithmetic op for op.
std::pair<at::Tensor, at::Tensor> axis_taps(const at::Tensor & index, const at::Tensor & size, std::int64_t side) {
    const auto src = index.to(at::kFloat) * (side - 1) / at::clamp_min(size - 1, 1);
    const auto floor = at::floor(src);
    const auto offsets = at::arange(0, 2, index.options());
    const auto taps = (floor.to(at::kLong).unsqueeze(1) + offsets).clamp(0, side - 1);
    const auto distance = (src.unsqueeze(1) - floor.unsqueeze(1) - offsets).abs();
    return {taps, (1 - distance).clamp_min(0)};
}

}  // namespace

std::int64_t Qwen3VisionConfig::grid_per_side() const {
    auto s = std::int64_t(std::sqrt(double(num_position_embeddings)));
    while (s * s > num_position_embeddings) --s;
    while ((s + 1) * (s + 1) <= num_position_embeddings) ++s;
    return s;
}

Qwen3VisionConfig Qwen3VisionConfig::from_file(const std::filesystem::path & f) {
    const json root = tower::read_config_json(f);
    if (!root.contains("vision_config") || !root.at("vision_config").is_object())
        bad_config(f, "vision_config", "is missing (a text-only config has no vision tower)");
    const json & j = root.at("vision_config");
    Qwen3VisionConfig c;
    c.depth = get_int(j, f, "depth");
    c.hidden_size = get_int(j, f, "hidden_size");
    c.num_heads = get_int(j, f, "num_heads");
    c.intermediate_size = get_int(j, f, "intermediate_size");
    c.patch_size = get_int(j, f, "patch_size");
    c.temporal_patch_size = get_int(j, f, "temporal_patch_size");
    c.spatial_merge_size = get_int(j, f, "spatial_merge_size");
    c.out_hidden_size = get_int(j, f, "out_hidden_size");
    c.num_position_embeddings = get_int(j, f, "num_position_embeddings");
    c.in_channels = j.contains("in_channels") ? get_int(j, f, "in_channels") : 3;
    if (!j.contains("deepstack_visual_indexes") || !j.at("deepstack_visual_indexes").is_array())
        bad_config(f, "vision_config.deepstack_visual_indexes", "is missing or not a list");
    for (const auto & v : j.at("deepstack_visual_indexes")) {
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= c.depth)
            bad_config(f, "vision_config.deepstack_visual_indexes",
                       "holds " + v.dump() + ", not a block index in [0, depth = " + std::to_string(c.depth) + ")");
        c.deepstack_visual_indexes.push_back(v.get<std::int64_t>());
    }
    c.hidden_act = j.value("hidden_act", std::string("gelu_pytorch_tanh"));
    if (c.hidden_act != "gelu_pytorch_tanh")
        bad_config(f, "vision_config.hidden_act", "is \"" + c.hidden_act + "\" (only gelu_pytorch_tanh is implemented)");
    if (c.hidden_size % c.num_heads != 0) bad_config(f, "vision_config.num_heads", "must divide hidden_size");
    if (c.head_dim() % 4 != 0)
        bad_config(f, "vision_config.num_heads", "gives a head size not a multiple of 4 (the 2-D rotary needs one)");
    // transformers 5 writes rope_parameters {rope_type: axial, rope_theta}; 4.x wrote none (theta 10000).
    if (j.contains("rope_parameters") && j.at("rope_parameters").is_object()) {
        const json & r = j.at("rope_parameters");
        const std::string type = r.value("rope_type", std::string("axial"));
        if (type != "axial")
            bad_config(f, "vision_config.rope_parameters.rope_type", "is \"" + type + "\" (only axial is implemented)");
        if (r.contains("rope_theta")) c.rope_theta = r.at("rope_theta").get<double>();
    }
    return c;
}

std::vector<model::GroupSpec> qwen3_vision_groups(Qwen3VisionConfig & c, const std::vector<std::string> & tensor_names) {
    static const char * const kPrefixes[] = {"model.visual.", "visual.", ""};
    c.weight_prefix.clear();
    for (const char * p : kPrefixes) {
        const std::string want = std::string(p) + "patch_embed.proj.weight";
        if (std::find(tensor_names.begin(), tensor_names.end(), want) != tensor_names.end()) {
            c.weight_prefix = p;
            break;
        }
        if (!*p)
            throw RuntimeError("vision tower checkpoint: no patch_embed.proj.weight under model.visual. / visual. / "
                               "(none); is this a Qwen3-VL text encoder with its vision tower, saved by transformers?");
    }
    std::vector<model::GroupSpec> groups(std::size_t(c.depth + 2));
    groups[0].name = "patch_embed";
    for (std::int64_t i = 0; i < c.depth; ++i) groups[std::size_t(i + 1)].name = "blocks." + std::to_string(i);
    groups.back().name = "merger";
    for (const auto & t : tower_tensors(c)) groups[t.group].tensors.push_back(c.weight_prefix + t.name);
    return groups;
}

void qwen3_vision_check_weights(const model::TensorFile & f, const Qwen3VisionConfig & c) {
    for (const auto & t : tower_tensors(c)) f.check(c.weight_prefix + t.name, t.shape);
}

namespace {

// pixel_values [patches, C*T*P*P] against grid_thw (each (t, h, w) positive, h and w multiples of the merge size, the
// patches adding up): UsageError naming what differs. Returns the number of patches.
std::int64_t check_vision_inputs(const Qwen3VisionConfig & c, const at::Tensor & pixel_values,
                                 const std::vector<std::array<std::int64_t, 3>> & grid_thw) {
    const std::int64_t M = c.spatial_merge_size;
    const std::int64_t patch_dim = c.in_channels * c.temporal_patch_size * c.patch_size * c.patch_size;
    if (pixel_values.dim() != 2 || pixel_values.size(1) != patch_dim)
        throw UsageError("vision tower: pixel_values must be [patches, " + std::to_string(patch_dim) +
                         "] (in_channels * temporal_patch_size * patch_size^2), got " +
                         model::shape_str(pixel_values.sizes()));
    if (grid_thw.empty()) throw UsageError("vision tower: no image (grid_thw is empty)");
    std::int64_t total = 0;
    for (std::size_t i = 0; i < grid_thw.size(); ++i) {
        const auto [t, h, w] = grid_thw[i];
        if (t <= 0 || h <= 0 || w <= 0 || h % M != 0 || w % M != 0)
            throw UsageError("vision tower: image " + std::to_string(i) + " has grid (" + std::to_string(t) + ", " +
                             std::to_string(h) + ", " + std::to_string(w) + "); t, h and w must be positive and h, w "
                             "multiples of spatial_merge_size " + std::to_string(M));
        total += t * h * w;
    }
    if (total != pixel_values.size(0))
        throw UsageError("vision tower: grid_thw gives " + std::to_string(total) + " patches, pixel_values holds " +
                         std::to_string(pixel_values.size(0)));
    return total;
}

// What every block and the patch embed need of the patches' layout: the position table's 4 taps and weights per
// patch, the rotary cos/sin [N, 1, D] (float32) and the attention segments (one per frame).
struct PatchLayout {
    at::Tensor interp_idx, interp_w, cos, sin;
    std::vector<std::int64_t> segments;
};

PatchLayout patch_layout(const Qwen3VisionConfig & c, const std::vector<std::array<std::int64_t, 3>> & grid_thw,
                         at::Device device) {
    const std::int64_t M = c.spatial_merge_size, D = c.head_dim();
    // Per patch (CPU, int64): its image's h and w, its index within its frame, the attention segments (one per
    // frame: get_vision_cu_seqlens without merge_temporal) and the rotary (row, col) of get_vision_position_ids.
    const auto longs = at::TensorOptions().dtype(at::kLong);
    std::vector<at::Tensor> heights, widths, within, pos;
    PatchLayout l;
    for (const auto & [t, h, w] : grid_thw) {
        const std::int64_t n = t * h * w;
        heights.push_back(at::full({n}, h, longs));
        widths.push_back(at::full({n}, w, longs));
        within.push_back(at::arange(n, longs) % (h * w));
        for (std::int64_t f = 0; f < t; ++f) l.segments.push_back(h * w);
        const auto grids = at::meshgrid({at::arange(h, longs), at::arange(w, longs)}, "ij");
        const auto block = [&](const at::Tensor & g) {
            return g.reshape({h / M, M, w / M, M}).transpose(1, 2).flatten();
        };
        pos.push_back(at::stack({block(grids[0]), block(grids[1])}, -1).repeat({t, 1}));
    }

    // get_vision_interpolation_indices_and_weights: each patch's (row, col) decoded from the merge-block order,
    // two taps per axis, their outer product (4 taps, weights float32).
    const std::int64_t side = c.grid_per_side();
    const auto hs = at::cat(heights), ws = at::cat(widths), in = at::cat(within);
    const auto blocks_w = ws.div(M, "floor");
    const auto row = in.div(M * M, "floor").div(blocks_w, "floor") * M + in.div(M, "floor") % M;
    const auto col = in.div(M * M, "floor") % blocks_w * M + in % M;
    const auto [h_taps, h_weights] = axis_taps(row, hs, side);
    const auto [w_taps, w_weights] = axis_taps(col, ws, side);
    l.interp_idx = (h_taps.unsqueeze(2) * side + w_taps.unsqueeze(1)).reshape({-1, 4}).to(device);
    l.interp_w = (h_weights.unsqueeze(2) * w_weights.unsqueeze(1)).reshape({-1, 4}).to(device);

    // Qwen3VLVisionRotaryEmbedding (axial): inv_freq over head_dim / 2 in float32, angles for h and w
    // concatenated, then duplicated over the two halves: cos/sin [N, 1, D] float32.
    const std::int64_t spatial = D / 2;
    const auto expo = at::arange(0, spatial, 2, at::TensorOptions().dtype(at::kFloat)) / double(spatial);
    const auto inv_freq = (1.0 / at::pow(at::Scalar(c.rope_theta), expo)).to(device);
    const auto freqs = at::cat(pos).to(device).unsqueeze(-1).to(at::kFloat) * inv_freq;  // [N, 2, D/4]
    const auto recompose = [](const at::Tensor & f) {
        const auto hw = at::cat({f.select(1, 0), f.select(1, 1)}, -1);
        return at::cat({hw, hw}, -1).unsqueeze(-2);
    };
    l.cos = recompose(freqs.cos());
    l.sin = recompose(freqs.sin());
    return l;
}

// One Qwen3VLVisionBlock (weights under `p`): attention with the 2-D rotary, SDPA per frame, then the MLP.
at::Tensor vision_block(const model::GroupTensors & t, const std::string & p, const at::Tensor & h,
                        const Qwen3VisionConfig & c, const PatchLayout & l) {
    const std::int64_t N = h.size(0), H = c.num_heads, D = c.head_dim();
    const double scale = 1.0 / std::sqrt(double(D));
    // Qwen3VLVisionAttention: qkv -> [3, N, H, D], rotary in float32, SDPA per frame, concatenated.
    const auto qkv = t.linear(p + "attn.qkv", true)(layer_norm(h, t, p + "norm1")).reshape({N, 3, H, D})
                         .permute({1, 0, 2, 3});
    const auto rope = [&](const at::Tensor & x) {
        const auto xf = x.to(at::kFloat);
        return (xf * l.cos + tower::rotate_half(xf) * l.sin).to(x.scalar_type()).transpose(0, 1).unsqueeze(0);
    };
    const auto q = rope(qkv[0]), k = rope(qkv[1]), v = qkv[2].transpose(0, 1).unsqueeze(0);
    const auto qs = q.split_with_sizes(l.segments, 2), ks = k.split_with_sizes(l.segments, 2),
               vs = v.split_with_sizes(l.segments, 2);
    std::vector<at::Tensor> outs;
    for (std::size_t s = 0; s < l.segments.size(); ++s)
        outs.push_back(at::scaled_dot_product_attention(qs[s], ks[s], vs[s], std::nullopt, 0.0, false, scale)
                           .transpose(1, 2).contiguous());
    const auto a = at::cat(outs, 1).reshape({N, -1});
    auto x = h + t.linear(p + "attn.proj", true)(a);
    const auto mlp = t.linear(p + "mlp.linear_fc2", true)(
        at::gelu(t.linear(p + "mlp.linear_fc1", true)(layer_norm(x, t, p + "norm2")), "tanh"));
    return x + mlp;
}

}  // namespace

VisionFeatures qwen3_vision_forward(model::ComponentWeights & weights, const Qwen3VisionConfig & c,
                                    const at::Tensor & pixel_values,
                                    const std::vector<std::array<std::int64_t, 3>> & grid_thw, at::ScalarType dtype,
                                    at::Device device, const VisionTowerCallbacks & cb) {
    const std::int64_t C = c.in_channels, T = c.temporal_patch_size, P = c.patch_size, M = c.spatial_merge_size,
                       hidden = c.hidden_size;
    check_vision_inputs(c, pixel_values, grid_thw);
    const auto l = patch_layout(c, grid_thw, device);

    // Patch embed (the Conv3d, stride = kernel: one output per patch) + the resampled position table.
    at::Tensor h = tower::with_group(weights, 0, [&](const model::GroupTensors & t) {
        const std::string p = c.weight_prefix;
        const auto x = pixel_values.to(device, dtype).view({-1, C, T, P, P});
        const auto w = t.at(p + "patch_embed.proj.weight");
        auto e = at::conv3d(x, w, t.at(p + "patch_embed.proj.bias"), {T, P, P}).view({-1, hidden});
        const auto table = t.at(p + "pos_embed.weight");
        const auto pe = (at::embedding(table, l.interp_idx) * l.interp_w.unsqueeze(-1)).sum(1);
        return e + pe.to(e.scalar_type());
    });

    std::vector<std::pair<std::int64_t, at::Tensor>> kept;  // (block, its output) for the deepstack mergers
    const int depth = int(c.depth);
    const auto & ds = c.deepstack_visual_indexes;
    for (std::int64_t i = 0; i < c.depth; ++i) {
        if (cb.check_interrupted) cb.check_interrupted(int(i));
        const std::string p = c.weight_prefix + "blocks." + std::to_string(i) + ".";
        h = tower::with_group(weights, std::size_t(i + 1),
                              [&](const model::GroupTensors & t) { return vision_block(t, p, h, c, l); });
        if (std::find(ds.begin(), ds.end(), i) != ds.end()) kept.emplace_back(i, h);
        if (cb.on_block) cb.on_block(int(i + 1), depth);
    }

    // The merger and the deepstack mergers (the last group): deepstack_features in block order, each through the
    // merger deepstack_visual_indexes.index(block) names, as the reference's loop appends them.
    const std::int64_t m = hidden * M * M;
    return tower::with_group(weights, std::size_t(c.depth + 1), [&](const model::GroupTensors & t) {
        VisionFeatures out;
        for (const auto & [block, x] : kept) {
            const auto k = std::find(ds.begin(), ds.end(), block) - ds.begin();
            out.deepstack.push_back(
                patch_merger(x, t, c.weight_prefix + "deepstack_merger_list." + std::to_string(k) + ".", m, true));
        }
        out.embeds = patch_merger(h, t, c.weight_prefix + "merger.", m, false);
        return out;
    });
}

}  // namespace ddo::text
