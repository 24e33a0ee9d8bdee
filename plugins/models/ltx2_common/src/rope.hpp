// LTX-2 rotary position embeddings (models.md §5.4, §5.8): coordinates in seconds / pixels and the (cos, sin) tables
// of diffusers' LTX2AudioVideoRotaryPosEmbed (models/transformers/transformer_ltx2.py; the DiT's four instances
// rope, audio_rope, cross_attn_rope, cross_attn_audio_rope) and LTX2RotaryPosEmbed1d (pipelines/ltx2/connectors.py),
// plus their application to projected queries / keys (apply_interleaved_rotary_emb, apply_split_rotary_emb).
// Coordinates and tables are fp32 on the coordinates' device; the frequency base is float64 when double_precision.
// Note [LTX-2 cross-modal RoPE heads] in docs/architecture.md.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "transformer_config.hpp"

namespace ddo::ltx2 {

// One RoPE instance: `dim` channels over `heads` heads (split tables are spread over the heads), positions divided
// by `max_pos` per axis (coordinates have max_pos.size() axes or fewer).
struct RopeSpec {
    int64_t dim = 0;
    int64_t heads = 1;
    std::vector<double> max_pos;
    double theta = 10000.0;
    bool double_precision = true;
    RopeType type = RopeType::interleaved;
};

// interleaved: cos/sin [B, S, dim]; split: [B, H, S, dim/(2H)].
struct RopeTables {
    at::Tensor cos, sin;
    RopeType type = RopeType::interleaved;
};

// The DiT's four instances (LTX2VideoTransformer3DModel.__init__ §4).
RopeSpec video_rope(const TransformerConfig & c);
RopeSpec audio_rope(const TransformerConfig & c);
RopeSpec cross_video_rope(const TransformerConfig & c);  // applied to video_coords[:, 0:1]
RopeSpec cross_audio_rope(const TransformerConfig & c);

// prepare_video_coords: [B, 3, F*H*W, 2] patch bounds [start, end) in (seconds, pixels, pixels), fp32.
at::Tensor video_coords(const TransformerConfig & c, int64_t batch, int64_t num_frames, int64_t height, int64_t width,
                        double fps, at::Device device);
// prepare_audio_coords: [B, 1, N, 2] bounds in seconds, fp32.
at::Tensor audio_coords(const TransformerConfig & c, int64_t batch, int64_t num_frames, at::Device device,
                        int64_t shift = 0);

// LTX2AudioVideoRotaryPosEmbed.forward: coords [B, A, N, 2] (bounds; the midpoint is used) or [B, A, N] (positions).
RopeTables rope_tables(const RopeSpec & spec, const at::Tensor & coords);
// LTX2RotaryPosEmbed1d.forward: positions i / base_seq_len for i < seq_len (spec.max_pos is ignored).
RopeTables connector_rope_tables(const RopeSpec & spec, int64_t batch, int64_t seq_len, double base_seq_len,
                                 at::Device device);

// Rotates x [B, S, C] (C = heads * head_dim, before the head split) with the tables; fp32 math, result in x's dtype.
at::Tensor apply_rope(const at::Tensor & x, const RopeTables & rope);

}  // namespace ddo::ltx2
