#pragma once
// The DiT-route rungs the LTX-2 ladders share: the image ladders' route rung (ltx2_image_parity_test,
// ltx2_image_img2img_parity_test: the transformer read through the offload engine on the resident, dynamic (the
// globals and block 0 resident, block 1 streamed) and disk routes gives bitwise the latents and image of the plain
// resident source) and the per-route checks of a quantized transformer (ltx2_image_parity_test,
// ltx2_pipeline_parity_test).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <string>

#include "cpu_plan.hpp"
#include "ddo/model/component_weights.hpp"
#include "ddo/model/tensor_file.hpp"
#include "image_transformer.hpp"
#include "weights.hpp"

namespace ddo::test {

// `run(&engine_weights)` runs the case with the DiT read through the engine and returns what has `.latents` and
// `.image`; `want` is the same case on the plain resident source. `label` prefixes the printed figures.
template <class Run, class Out>
void expect_image_dit_routes_bitwise(const std::filesystem::path & transformer_dir, const ddo_allocator_vtable * linear,
                                     const Out & want, Run && run, const std::string & label) {
    namespace lt = ddo::ltx2;
    const auto tc = lt::image_transformer_config_from_file(transformer_dir / "config.json");
    const auto groups = lt::image_transformer_groups(tc);
    const auto tf = ddo::model::TensorFile::open_component(transformer_dir);
    std::uint64_t resident_bytes = 0;  // the globals and block 0: block 1 streams on the dynamic route
    for (const auto & g : groups)
        if (g.name != "transformer_blocks.1")
            for (const auto & n : g.tensors) resident_bytes += tf.nbytes_of(n);
    struct Route {
        ddo::Route route;
        double resident_gb;
        const char * name;
    };
    for (const Route & r : {Route{ddo::Route::resident, 0, "resident"},
                            Route{ddo::Route::dynamic, double(resident_bytes + 1024) / 1073741824.0, "dynamic"},
                            Route{ddo::Route::disk, 0, "disk"}}) {
        const auto plan = cpu_plan("transformer", r.route, linear, r.resident_gb);
        auto cw = ddo::model::ComponentWeights::open(transformer_dir, groups, plan, at::kFloat);
        lt::EngineWeights ew(*cw, groups, at::kFloat, at::kCPU);
        const auto got = run(&ew);
        EXPECT_EQ(cw->finish(), 0u) << r.name << ": outstanding owners at the end of the phase";
        EXPECT_EQ(cw->route(), r.name);
        const at::Tensor & latents = got.latents, & image = got.image;
        EXPECT_TRUE(at::equal(latents, want.latents))
            << r.name << ": latents differ by up to " << at::Tensor(latents - want.latents).abs().max().item<double>();
        EXPECT_TRUE(at::equal(image, want.image)) << r.name << ": image differs";
        if (r.route != ddo::Route::resident) {
            EXPECT_GT(cw->bytes_streamed(), 0u) << r.name;
        }
        std::cout << "[ routes    ] " << label << "transformer on " << r.name << ": latents and image bitwise equal, "
                  << cw->bytes_streamed() << " bytes streamed\n";
    }
}

// A quantized transformer on one engine route: bytes streamed off the resident route, the disk route streaming more
// than the dynamic one (`dynamic_streamed` carries the dynamic route's figure to the disk route's call), the report's
// quantization block (the method, the format counted, fewer stored than dense bytes, a dequantization done), then a
// line of figures. `c` names the case, `r` the route.
inline void expect_quantized_route(const ddo::model::ComponentWeights & cw, ddo::Route route, const std::string & c,
                                   const std::string & r, const std::string & method, const std::string & format,
                                   std::uint64_t & dynamic_streamed) {
    if (route != ddo::Route::resident) {
        EXPECT_GT(cw.bytes_streamed(), 0u) << c << " " << r;
    }
    if (route == ddo::Route::dynamic) dynamic_streamed = cw.bytes_streamed();
    if (route == ddo::Route::disk) {
        EXPECT_LT(dynamic_streamed, cw.bytes_streamed()) << c << ": the dynamic route streamed everything";
    }
    const auto q = cw.report().at("quantization");
    EXPECT_EQ(q.at("method"), method) << c << " " << r << ": " << q.dump();
    EXPECT_GT(q.at("formats").value(format, 0), 0) << c << " " << r << ": " << q.dump();
    EXPECT_LT(q.at("stored_bytes").get<std::uint64_t>(), q.at("dense_bytes").get<std::uint64_t>()) << q.dump();
    EXPECT_GT(q.at("dequant_count").get<std::uint64_t>(), 0u) << q.dump();
    std::cout << "[ quant     ] " << c << " on " << r
              << (route == ddo::Route::resident ? "" : ": bitwise equal to the engine's resident route") << "; "
              << cw.bytes_streamed() << " bytes streamed; stored " << q.at("stored_bytes") << " of "
              << q.at("dense_bytes") << " dense bytes, " << q.at("formats").dump() << "\n";
}

}  // namespace ddo::test
