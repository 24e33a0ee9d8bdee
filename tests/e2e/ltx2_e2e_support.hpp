// What the LTX-2 ddo-host tests (tests/e2e/ltx2_image_test.cpp, ltx2_video_test.cpp) share: a breakable copy of a
// fixture checkpoint, its transformer's tensors rewritten, and the checks on a run that must fail before denoising.
#pragma once

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "ddo/model/tensor_file.hpp"
#include "ddo/model/tensor_output.hpp"
#include "e2e/host_run.hpp"

namespace ddo::test {

// A copy of the checkpoint `src` under the temp directory as <name>_<pid>: every component linked but the
// transformer, which is copied (to break). The caller removes it.
inline std::filesystem::path broken_copy(const std::filesystem::path & src, const std::string & name) {
    namespace fs = std::filesystem;
    const fs::path dst = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
    fs::remove_all(dst);
    fs::create_directories(dst / "transformer");
    for (const auto & e : fs::directory_iterator(src))
        if (e.path().filename() != "transformer") fs::create_symlink(e.path(), dst / e.path().filename());
    for (const auto & e : fs::directory_iterator(src / "transformer"))
        fs::copy(e.path(), dst / "transformer" / e.path().filename());
    return dst;
}

// Rewrites the transformer of `ckpt` (a broken_copy) with its tensors as `edit` leaves them.
inline void rewrite_transformer(const std::filesystem::path & ckpt,
                                const std::function<void(model::NamedTensors &)> & edit) {
    const std::filesystem::path file = ckpt / "transformer" / "diffusion_pytorch_model.safetensors";
    const auto f = model::TensorFile::open_file(file);
    model::NamedTensors t;
    for (const auto & n : f.names()) t.push_back({n, f.read(n)});
    edit(t);
    const auto bytes = model::encode_safetensors(t, {{"format", "pt"}});
    std::filesystem::remove(file);
    std::ofstream(file, std::ios::binary) << bytes;
}

// ddo-host with `args` on `ckpt` fails before denoising: exit 4, the log naming `names` and the transformer's
// folder, the report written (failed, no step, no output).
inline void expect_exit4_before_denoise(const std::string & tag, const std::string & args,
                                        const std::filesystem::path & ckpt, const std::string & names) {
    const auto r = run_ddo_host(tag, args);
    EXPECT_EQ(r.exit_code, 4) << tag << "\n" << r.log;
    EXPECT_NE(r.log.find(names), std::string::npos) << tag << ": names " << names << "\n" << r.log;
    EXPECT_NE(r.log.find((ckpt / "transformer").string()), std::string::npos) << tag << ": names the file\n" << r.log;
    EXPECT_EQ(r.report.at("status"), "failed") << tag;
    EXPECT_TRUE(r.report.at("steps").empty()) << tag << ": failed before denoising";
    EXPECT_TRUE(r.report.at("outputs").empty()) << tag;
}

// The malformed transformers both LTX-2 plugins refuse with exit 4 before denoising, on broken copies of `src`
// named <prefix>_<case>, run with `args_of(ckpt)`: a tensor missing (transformer_blocks.1.attn2.to_k.weight) and a
// tensor of the wrong shape (transformer_blocks.0.ff.net.2.weight).
inline void expect_missing_and_misshapen_tensors_exit4(
    const std::filesystem::path & src, const std::string & prefix,
    const std::function<std::string(const std::filesystem::path &)> & args_of) {
    {  // a tensor missing
        const auto ckpt = broken_copy(src, prefix + "_broken_missing");
        rewrite_transformer(ckpt, [](model::NamedTensors & t) {
            std::erase_if(t, [](const auto & e) { return e.first == "transformer_blocks.1.attn2.to_k.weight"; });
        });
        expect_exit4_before_denoise(prefix + "_bad_missing", args_of(ckpt), ckpt,
                                    "transformer_blocks.1.attn2.to_k.weight");
        std::filesystem::remove_all(ckpt);
    }
    {  // a tensor of the wrong shape
        const auto ckpt = broken_copy(src, prefix + "_broken_shape");
        rewrite_transformer(ckpt, [](model::NamedTensors & t) {
            for (auto & [n, v] : t)
                if (n == "transformer_blocks.0.ff.net.2.weight") v = at::zeros({v.size(0), v.size(1) + 1});
        });
        expect_exit4_before_denoise(prefix + "_bad_shape", args_of(ckpt), ckpt, "transformer_blocks.0.ff.net.2.weight");
        std::filesystem::remove_all(ckpt);
    }
}

}  // namespace ddo::test
