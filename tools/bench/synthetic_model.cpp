#include "synthetic_model.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <dlfcn.h>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"

namespace ddo::bench {

namespace {

std::string blk(int b) { return "blocks." + std::to_string(b); }

struct Lin { std::string name; int out, in; const char * part; };

std::vector<Lin> block_linears(const SyntheticShape & s, int b) {
    const int d = s.width, h = s.width * s.mlp_ratio;
    const std::string p = blk(b);
    return {{p + ".attn.to_q.weight", d, d, "attn"}, {p + ".attn.to_k.weight", d, d, "attn"},
            {p + ".attn.to_v.weight", d, d, "attn"}, {p + ".attn.to_out.weight", d, d, "attn"},
            {p + ".mlp.gate.weight", h, d, "mlp"},   {p + ".mlp.up.weight", h, d, "mlp"},
            {p + ".mlp.down.weight", d, h, "mlp"}};
}

std::uint32_t xorshift(std::uint32_t & s) {
    s ^= s << 13; s ^= s >> 17; s ^= s << 5;
    return s;
}

// y[t, o] = sum_i x[t, i] * w[o, i], fixed order (8 lanes, then lanes summed in order).
void matmul_t(const float * x, const float * w, float * y, int T, int in, int out) {
    for (int o = 0; o < out; ++o) {
        const float * wr = w + static_cast<std::size_t>(o) * in;
        for (int t = 0; t < T; ++t) {
            const float * xr = x + static_cast<std::size_t>(t) * in;
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            int i = 0;
            for (; i + 8 <= in; i += 8)
                for (int j = 0; j < 8; ++j) acc[j] += xr[i + j] * wr[i + j];
            float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
            for (; i < in; ++i) s += xr[i] * wr[i];
            y[static_cast<std::size_t>(t) * out + o] = s;
        }
    }
}

const float * w(const engine::Lease & l, const std::string & name) {
    return static_cast<const float *>(l.view(name).data);
}

}  // namespace

void write_safetensors(const std::filesystem::path & file, const std::vector<RawTensor> & tensors,
                       const std::vector<std::pair<std::string, std::string>> & metadata) {
    nlohmann::json h = nlohmann::json::object();
    std::uint64_t off = 0;
    for (const auto & t : tensors) {
        h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
        off += t.bytes.size();
    }
    if (!metadata.empty()) {
        nlohmann::json m = nlohmann::json::object();
        for (const auto & [k, v] : metadata) m[k] = v;
        h["__metadata__"] = m;
    }
    std::string hs = h.dump();
    while (hs.size() % 8) hs.push_back(' ');
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    if (!out) throw RuntimeError("cannot write " + file.string());
    std::uint64_t n = hs.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    out.write(reinterpret_cast<const char *>(len), 8);
    out.write(hs.data(), static_cast<std::streamsize>(hs.size()));
    for (const auto & t : tensors) out.write(reinterpret_cast<const char *>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
    if (!out) throw RuntimeError("short write to " + file.string());
}

void write_synthetic_checkpoint(const std::filesystem::path & file, const SyntheticShape & s, std::uint32_t seed) {
    std::vector<RawTensor> ts;
    std::uint32_t st = seed * 2654435761u + 12345u;
    for (int b = 0; b < s.blocks; ++b)
        for (const auto & l : block_linears(s, b)) {
            RawTensor t{l.name, "F32", {l.out, l.in}, {}};
            t.bytes.resize(static_cast<std::size_t>(l.out) * l.in * 4);
            auto * f = reinterpret_cast<float *>(t.bytes.data());
            const float scale = 1.0f / std::sqrt(static_cast<float>(l.in));
            for (std::size_t i = 0; i < static_cast<std::size_t>(l.out) * l.in; ++i)
                f[i] = (static_cast<float>(xorshift(st) % 2001) / 1000.0f - 1.0f) * scale;
            ts.push_back(std::move(t));
        }
    write_safetensors(file, ts, {{"format", "pt"}, {"ddo", "synthetic"}});
}

std::vector<engine::GroupDecl> synthetic_groups(const SyntheticShape & s) {
    std::vector<engine::GroupDecl> g;
    for (int b = 0; b < s.blocks; ++b) {
        engine::GroupDecl d{blk(b), {}, {}};
        for (const auto & l : block_linears(s, b)) { d.tensors.push_back(l.name); d.parts.push_back(l.part); }
        g.push_back(std::move(d));
    }
    return g;
}

std::vector<float> synthetic_input(const SyntheticShape & s) {
    std::vector<float> x(static_cast<std::size_t>(s.tokens) * s.width);
    std::uint32_t st = 777;
    for (auto & v : x) v = static_cast<float>(xorshift(st) % 2001) / 1000.0f - 1.0f;
    return x;
}

std::vector<float> run_synthetic(engine::Engine & e, const SyntheticShape & s, int steps, std::vector<double> * step_seconds) {
    const int T = s.tokens, d = s.width, h = s.width * s.mlp_ratio;
    const auto & layout = e.layout();
    std::vector<float> x, q(T * d), k(T * d), v(T * d), m(T * d), o(T * d), g(static_cast<std::size_t>(T) * h),
        u(static_cast<std::size_t>(T) * h);
    for (int step = 0; step < steps; ++step) {
        auto t0 = std::chrono::steady_clock::now();
        x = synthetic_input(s);
        for (std::size_t gi = 0; gi < layout.size(); ++gi) {
            engine::Lease l = e.acquire(gi);
            const auto & gl = layout.group(gi);
            const std::string & p = gl.decl;
            const bool attn = gl.part.empty() || gl.part == "attn" || gl.part.find(".attn.") != std::string::npos;
            const bool mlp = gl.part.empty() || gl.part == "mlp" || gl.part.find(".mlp.") != std::string::npos;
            if (!gl.part.empty() && gl.part != "attn" && gl.part != "mlp") {
                // leaf granularity: one linear per group; run the whole block when its last leaf arrives
                // would need several leases, so leaf groups are applied as they come (same math order).
                const std::string & leaf = gl.part;
                const float * W = static_cast<const float *>(l.data());
                if (leaf.ends_with("to_q")) matmul_t(x.data(), W, q.data(), T, d, d);
                else if (leaf.ends_with("to_k")) matmul_t(x.data(), W, k.data(), T, d, d);
                else if (leaf.ends_with("to_v")) matmul_t(x.data(), W, v.data(), T, d, d);
                else if (leaf.ends_with("to_out")) {
                    for (int i = 0; i < T * d; ++i) m[i] = 0.5f * q[i] + 0.25f * std::tanh(k[i]) + 0.25f * v[i];
                    matmul_t(m.data(), W, o.data(), T, d, d);
                    for (int i = 0; i < T * d; ++i) x[i] += 0.5f * o[i];
                } else if (leaf.ends_with("gate")) matmul_t(x.data(), W, g.data(), T, d, h);
                else if (leaf.ends_with("up")) {
                    matmul_t(x.data(), W, u.data(), T, d, h);
                    for (std::size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
                } else if (leaf.ends_with("down")) {
                    matmul_t(g.data(), W, o.data(), T, h, d);
                    for (int i = 0; i < T * d; ++i) x[i] += 0.5f * o[i];
                }
                continue;
            }
            if (attn) {
                matmul_t(x.data(), w(l, p + ".attn.to_q.weight"), q.data(), T, d, d);
                matmul_t(x.data(), w(l, p + ".attn.to_k.weight"), k.data(), T, d, d);
                matmul_t(x.data(), w(l, p + ".attn.to_v.weight"), v.data(), T, d, d);
                for (int i = 0; i < T * d; ++i) m[i] = 0.5f * q[i] + 0.25f * std::tanh(k[i]) + 0.25f * v[i];
                matmul_t(m.data(), w(l, p + ".attn.to_out.weight"), o.data(), T, d, d);
                for (int i = 0; i < T * d; ++i) x[i] += 0.5f * o[i];
            }
            if (mlp) {
                matmul_t(x.data(), w(l, p + ".mlp.gate.weight"), g.data(), T, d, h);
                matmul_t(x.data(), w(l, p + ".mlp.up.weight"), u.data(), T, d, h);
                for (std::size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
                matmul_t(g.data(), w(l, p + ".mlp.down.weight"), o.data(), T, h, d);
                for (int i = 0; i < T * d; ++i) x[i] += 0.5f * o[i];
            }
        }
        if (step_seconds) step_seconds->push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return x;
}

namespace {
void stub_log(void *, int32_t, const char *, const char *) {}
void stub_set_error(void *, int32_t, const char *) {}
const ddo_host_api kStubHost{sizeof(ddo_host_api), DDO_ABI_VERSION_MINOR, nullptr, stub_log, stub_set_error};
}  // namespace

const ddo_allocator_vtable * load_allocator_for_tests(const std::filesystem::path & so) {
    void * h = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) throw RuntimeError("cannot load " + so.string() + ": " + ::dlerror() + "; build the target first");
    auto neg = reinterpret_cast<ddo_plugin_negotiate_fn>(::dlsym(h, DDO_PLUGIN_NEGOTIATE_SYMBOL));
    auto get = reinterpret_cast<ddo_plugin_get_vtable_fn>(::dlsym(h, DDO_PLUGIN_GET_VTABLE_SYMBOL));
    if (!neg || !get) throw RuntimeError(so.string() + " lacks the plugin entry points");
    ddo_plugin_info info{};
    info.struct_size = sizeof(info);
    if (neg(DDO_ABI_VERSION_MAJOR, DDO_ABI_VERSION_MINOR, &info) != DDO_STATUS_OK || info.kind != DDO_PLUGIN_KIND_ALLOCATOR)
        throw RuntimeError(so.string() + " is not an allocator plugin");
    return static_cast<const ddo_allocator_vtable *>(get(&kStubHost));
}

std::filesystem::path linear_plugin_path(const std::filesystem::path & build_dir) {
    return build_dir / "lib" / "ddo" / "plugins" / "libddo_allocator_linear.so";
}

}  // namespace ddo::bench
