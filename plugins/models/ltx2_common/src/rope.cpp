// LTX-2 RoPE (reference: LTX2AudioVideoRotaryPosEmbed, LTX2RotaryPosEmbed1d and apply_*_rotary_emb in diffusers
// 0.42.1; every operation below mirrors one of theirs, in the same order and dtype).
#include "rope.hpp"

#include <cmath>

namespace ddo::ltx2 {
namespace {

at::TensorOptions f32(at::Device d) { return at::TensorOptions().dtype(at::kFloat).device(d); }

// freqs [B, S, steps * axes] (frequency-major, axis-minor) -> padded cos/sin tables.
RopeTables tables_from(const RopeSpec & spec, const at::Tensor & grid /* [B, S, axes] fp32 */) {
    const int64_t axes = grid.size(2);
    const int64_t elems = axes * 2;
    const auto fdt = spec.double_precision ? at::kDouble : at::kFloat;
    auto pow_indices = at::pow(spec.theta, at::linspace(0.0, 1.0, spec.dim / elems, grid.options().dtype(fdt)));
    auto freqs = (pow_indices * M_PI / 2.0).to(at::kFloat);
    freqs = (grid.unsqueeze(-1) * 2 - 1) * freqs;   // [B, S, axes, steps]
    freqs = freqs.transpose(-1, -2).flatten(2);      // [B, S, steps * axes]
    RopeTables t;
    t.type = spec.type;
    if (spec.type == RopeType::interleaved) {
        t.cos = freqs.cos().repeat_interleave(2, -1);
        t.sin = freqs.sin().repeat_interleave(2, -1);
        const int64_t pad = spec.dim % elems;
        if (pad != 0) {
            t.cos = at::cat({at::ones_like(t.cos.slice(-1, 0, pad)), t.cos}, -1);
            t.sin = at::cat({at::zeros_like(t.cos.slice(-1, 0, pad)), t.sin}, -1);
        }
    } else {
        auto c = freqs.cos();
        auto s = freqs.sin();
        const int64_t pad = spec.dim / 2 - freqs.size(-1);
        if (pad != 0) {
            c = at::cat({at::ones_like(c.slice(-1, 0, pad)), c}, -1);
            s = at::cat({at::zeros_like(s.slice(-1, 0, pad)), s}, -1);
        }
        const int64_t b = c.size(0), n = c.size(1);
        t.cos = c.reshape({b, n, spec.heads, -1}).transpose(1, 2);
        t.sin = s.reshape({b, n, spec.heads, -1}).transpose(1, 2);
    }
    return t;
}

RopeSpec spec(const TransformerConfig & c, int64_t dim, int64_t heads, std::vector<double> max_pos) {
    return {dim, heads, std::move(max_pos), c.rope_theta, c.rope_double_precision, c.rope_type};
}

}  // namespace

RopeSpec video_rope(const TransformerConfig & c) {
    return spec(c, c.inner_dim(), c.num_attention_heads,
                {double(c.pos_embed_max_pos), double(c.base_height), double(c.base_width)});
}

RopeSpec audio_rope(const TransformerConfig & c) {
    return spec(c, c.audio_inner_dim(), c.audio_num_attention_heads, {double(c.audio_pos_embed_max_pos)});
}

RopeSpec cross_video_rope(const TransformerConfig & c) {
    const double m = double(std::max(c.pos_embed_max_pos, c.audio_pos_embed_max_pos));
    return spec(c, c.audio_cross_attention_dim, c.num_attention_heads, {m, double(c.base_height), double(c.base_width)});
}

RopeSpec cross_audio_rope(const TransformerConfig & c) {
    const double m = double(std::max(c.pos_embed_max_pos, c.audio_pos_embed_max_pos));
    return spec(c, c.audio_cross_attention_dim, c.audio_num_attention_heads, {m});
}

at::Tensor video_coords(const TransformerConfig & c, int64_t batch, int64_t num_frames, int64_t height, int64_t width,
                        double fps, at::Device device) {
    auto gf = at::arange(0, num_frames, c.patch_size_t, f32(device));
    auto gh = at::arange(0, height, c.patch_size, f32(device));
    auto gw = at::arange(0, width, c.patch_size, f32(device));
    auto grid = at::stack(at::meshgrid({gf, gh, gw}, "ij"), 0);  // [3, F, H, W]
    auto delta = at::tensor({double(c.patch_size_t), double(c.patch_size), double(c.patch_size)}, f32(device));
    auto ends = grid + delta.view({3, 1, 1, 1});
    auto latent = at::stack({grid, ends}, -1).flatten(1, 3).unsqueeze(0).repeat({batch, 1, 1, 1});  // [B, 3, N, 2]
    auto scale = at::tensor({c.vae_scale_factors[0], c.vae_scale_factors[1], c.vae_scale_factors[2]},
                            at::TensorOptions().dtype(at::kLong).device(device));
    auto px = latent * scale.view({1, -1, 1, 1});
    auto t = px.select(1, 0);
    t.copy_((t + c.causal_offset - c.vae_scale_factors[0]).clamp_min(0));
    t.copy_(t / fps);
    return px;
}

at::Tensor audio_coords(const TransformerConfig & c, int64_t batch, int64_t num_frames, at::Device device,
                        int64_t shift) {
    auto gf = at::arange(shift, num_frames + shift, c.audio_patch_size_t, f32(device));
    const int64_t s = c.audio_scale_factor;
    auto start = (gf * s + c.causal_offset - s).clamp_min(0) * c.audio_hop_length / c.audio_sampling_rate;
    auto end = ((gf + c.audio_patch_size_t) * s + c.causal_offset - s).clamp_min(0) * c.audio_hop_length /
               c.audio_sampling_rate;
    return at::stack({start, end}, -1).unsqueeze(0).expand({batch, -1, -1}).unsqueeze(1);
}

RopeTables rope_tables(const RopeSpec & spec, const at::Tensor & coords_in) {
    auto coords = coords_in;
    if (coords.dim() == 4) {
        auto halves = coords.chunk(2, -1);
        coords = ((halves[0] + halves[1]) / 2.0).squeeze(-1);  // [B, A, N]
    }
    const int64_t axes = coords.size(1);
    std::vector<at::Tensor> cols;
    for (int64_t i = 0; i < axes; ++i) cols.push_back(coords.select(1, i) / spec.max_pos.at(size_t(i)));
    return tables_from(spec, at::stack(cols, -1));
}

RopeTables connector_rope_tables(const RopeSpec & spec, int64_t batch, int64_t seq_len, double base_seq_len,
                                 at::Device device) {
    auto grid = at::arange(seq_len, f32(device)) / base_seq_len;
    return tables_from(spec, grid.unsqueeze(0).repeat({batch, 1}).unsqueeze(-1));
}

at::Tensor apply_rope(const at::Tensor & x, const RopeTables & rope) {
    if (rope.type == RopeType::interleaved) {
        auto pairs = x.unflatten(2, {-1, 2}).unbind(-1);
        auto rotated = at::stack({-pairs[1], pairs[0]}, -1).flatten(2);
        return (x.to(at::kFloat) * rope.cos + rotated.to(at::kFloat) * rope.sin).to(x.scalar_type());
    }
    const int64_t b = rope.cos.size(0), h = rope.cos.size(1), t = rope.cos.size(2);
    auto xs = x.reshape({b, t, h, -1}).swapaxes(1, 2);
    const int64_t last = xs.size(-1);
    const int64_t r = last / 2;
    std::vector<int64_t> split_shape(xs.sizes().begin(), xs.sizes().end() - 1);
    split_shape.push_back(2);
    split_shape.push_back(r);
    auto split_x = xs.reshape(split_shape).to(at::kFloat);
    auto first_x = split_x.slice(-2, 0, 1);
    auto second_x = split_x.slice(-2, 1, 2);
    auto cos_u = rope.cos.unsqueeze(-2);
    auto sin_u = rope.sin.unsqueeze(-2);
    auto out = split_x * cos_u;
    auto first_out = out.slice(-2, 0, 1);
    auto second_out = out.slice(-2, 1, 2);
    first_out.addcmul_(-sin_u, second_x);
    second_out.addcmul_(sin_u, first_x);
    std::vector<int64_t> back(out.sizes().begin(), out.sizes().end() - 2);
    back.push_back(last);
    out = out.reshape(back).swapaxes(1, 2).reshape({b, t, -1});
    return out.to(x.scalar_type());
}

}  // namespace ddo::ltx2
