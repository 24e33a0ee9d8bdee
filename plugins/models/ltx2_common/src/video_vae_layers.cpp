// The LTX-2 video VAE's shared layers (PerChannelRMSNorm, LTX2VideoCausalConv3d, LTX2VideoResnetBlock3d) in ATen.
// Reference: diffusers models/autoencoders/autoencoder_kl_ltx2.py.
#include "video_vae_layers.hpp"

#include <map>

#include "ddo/torch/conv3d.hpp"

namespace ddo::ltx2 {
namespace {

// The module that holds a tensor directly: its path without the parameter name.
std::string module_of(const std::string & tensor) { return tensor.substr(0, tensor.rfind('.')); }

const char * pad_mode(SpatialPadding p) {
    switch (p) {
    case SpatialPadding::reflect: return "reflect";
    case SpatialPadding::replicate: return "replicate";
    case SpatialPadding::circular: return "circular";
    case SpatialPadding::zeros: break;
    }
    return "constant";
}

}  // namespace

at::Tensor per_channel_rms_norm(const at::Tensor & x) { return x / at::sqrt(x.pow(2).mean({1}, true) + 1e-8); }

at::Tensor video_vae_causal_conv(Weights & w, const at::Tensor & x, const std::string & p, bool causal,
                                 SpatialPadding padding, int64_t stride) {
    Weights::Scope s(w, p);
    const auto weight = w.get(p + ".weight");
    const auto bias = w.get(p + ".bias");
    const int64_t kt = weight.size(2), ph = weight.size(3) / 2, pw = weight.size(4) / 2;
    at::Tensor h = x;
    if (kt > 1) {
        const int64_t front = causal ? kt - 1 : (kt - 1) / 2, back = causal ? 0 : (kt - 1) / 2;
        std::vector<at::Tensor> parts;
        if (front) parts.push_back(x.narrow(2, 0, 1).repeat({1, 1, front, 1, 1}));
        parts.push_back(x);
        if (back) parts.push_back(x.narrow(2, x.size(2) - 1, 1).repeat({1, 1, back, 1, 1}));
        if (parts.size() > 1) h = at::cat(parts, 2);
    }
    // ddo::torch::conv3d: at::conv3d without oneDNN's weight copy where that copy outweighs the input (Note [Conv3d
    // weight reorder]).
    if (padding == SpatialPadding::zeros) return torch::conv3d(h, weight, bias, {stride, stride, stride}, {0, ph, pw});
    if (ph || pw) h = at::pad(h, {pw, pw, ph, ph, 0, 0}, pad_mode(padding));
    return torch::conv3d(h, weight, bias, {stride, stride, stride}, {0, 0, 0});
}

at::Tensor video_vae_resnet(Weights & w, const at::Tensor & x, const std::string & p, int64_t in, int64_t out,
                            bool causal, SpatialPadding padding, double eps, const at::Tensor & temb) {
    at::Tensor h = per_channel_rms_norm(x);
    std::vector<at::Tensor> mod;  // shift_1, scale_1, shift_2, scale_2
    if (temb.defined()) {
        Weights::Scope s(w, p);
        const auto table = w.get(p + ".scale_shift_table");
        mod = (temb.unflatten(1, {4, -1}) + table.view({1, 4, in, 1, 1, 1})).unbind(1);
        h = h * (mod[1] + 1) + mod[0];
    }
    h = video_vae_causal_conv(w, at::silu(h), p + ".conv1.conv", causal, padding);
    h = per_channel_rms_norm(h);
    if (temb.defined()) h = h * (mod[3] + 1) + mod[2];
    h = video_vae_causal_conv(w, at::silu(h), p + ".conv2.conv", causal, padding);
    at::Tensor shortcut = x;
    if (in != out) {
        {
            Weights::Scope s(w, p + ".norm3");
            shortcut = at::layer_norm(shortcut.movedim(1, -1), {in}, w.get(p + ".norm3.weight"),
                                      w.get(p + ".norm3.bias"), eps)
                           .movedim(-1, 1);
        }
        Weights::Scope s(w, p + ".conv_shortcut");
        shortcut = torch::conv3d(shortcut, w.get(p + ".conv_shortcut.weight"), w.get(p + ".conv_shortcut.bias"),
                                 {1, 1, 1}, {0, 0, 0});
    }
    return h + shortcut;
}

std::vector<model::GroupSpec> video_vae_groups_of(const VideoVaeWeightSpec & spec) {
    std::vector<model::GroupSpec> groups;
    std::map<std::string, std::size_t> index;
    for (const auto & [name, shape] : spec) {
        const auto module = module_of(name);
        auto [it, fresh] = index.emplace(module, groups.size());
        if (fresh) groups.push_back({module, {}});
        groups[it->second].tensors.push_back(name);
    }
    return groups;
}

}  // namespace ddo::ltx2
