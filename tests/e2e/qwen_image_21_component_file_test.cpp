// ddo-host --transformer FILE (Note [Component files]) on the quantized parity fixtures
// (tools/reference/qwen_image_21_quant_fixtures.py): the GGUF Q4_K transformer under ComfyUI's names, given as a file
// to a checkpoint whose transformer/ holds only config.json, makes the image the folder form makes, byte for byte,
// and the report names the file (identity: replaced_by with its header hash; counters: the GGUF formats; the console
// plan and `report summarize`: the formats, stored and dense sizes). Another
// model's file, a file for a component the run does not read and a truncated file are refused with the documented
// exit codes, the report written.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "e2e/host_run.hpp"
#include "ddo/store/safetensors_file.hpp"
#include "e2e/png_read.hpp"
#include "synthetic_model.hpp"

namespace fs = std::filesystem;
using ddo::test::quoted;
using nlohmann::json;

namespace {

const fs::path kDir = QI21Q_FIXTURE_DIR;

std::string base(const fs::path & model) {
    return "--plugin qwen_image --preset low_ram_safe.toml --model " + quoted(model) + " --prompt-embeds " +
           quoted(kDir / "prompt_embeds.safetensors") + " --steps 2 --width 64 --height 64 ";
}

// `summary`: what `ddo-host report summarize` prints for the run's report.
ddo::test::HostRun run(const std::string & tag, const std::string & args, std::vector<uint8_t> * pixels = nullptr,
                       std::string * summary = nullptr) {
    return ddo::test::run_ddo_host("component_file_" + tag, args, [&](const fs::path & dir) {
        if (pixels && fs::exists(dir / "image.png")) *pixels = ddo::test::read_png(dir / "image.png").pixels;
        if (summary) {
            const std::string cmd = std::string("'") + DDO_HOST_BIN + "' report summarize " + quoted(dir / "report.json");
            FILE * p = ::popen(cmd.c_str(), "r");
            ASSERT_NE(p, nullptr);
            char buf[4096];
            for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) summary->append(buf, n);
            EXPECT_EQ(::pclose(p), 0) << *summary;
        }
    });
}

}  // namespace

TEST(Qi21ComponentFile, AGgufTransformerFileMakesTheImageOfTheFolderForm) {
    std::vector<uint8_t> folder_px, file_px;
    std::string summary;
    const auto folder = run("folder", base(kDir / "gguf_q4_k"), &folder_px);
    ASSERT_EQ(folder.exit_code, 0) << folder.log;
    const auto file = run("file", base(kDir / "gguf_single") + "--transformer " + quoted(kDir / "gguf_q4_k_comfy.gguf"),
                          &file_px, &summary);
    ASSERT_EQ(file.exit_code, 0) << file.log;
    // The plan on the console and `report summarize` say what is quantized and how much smaller it is stored.
    EXPECT_NE(file.log.find("quantized gguf: "), std::string::npos) << file.log;
    EXPECT_NE(summary.find("quantized gguf: "), std::string::npos) << summary;
    EXPECT_NE(summary.find("Q4_K "), std::string::npos) << summary;
    EXPECT_NE(summary.find(" dense; decoded "), std::string::npos) << summary;
    ASSERT_FALSE(folder_px.empty());
    EXPECT_EQ(file_px, folder_px) << "the file form's image differs from the folder form's";

    const auto & id = file.report.at("identity").at("checkpoint").at("identity").at("components").at("transformer");
    ASSERT_TRUE(id.contains("replaced_by")) << id.dump();
    EXPECT_EQ(id.at("replaced_by").at("file"), fs::absolute(kDir / "gguf_q4_k_comfy.gguf").string());
    EXPECT_GT(id.at("replaced_by").at("header_bytes").get<std::uint64_t>(), 0u);
    EXPECT_EQ(id.at("replaced_by").at("header_xxh3_128").get<std::string>().size(), 32u);
    EXPECT_TRUE(id.at("config").is_object()) << "config.json still comes from the folder: " << id.dump();
    const auto & q = file.report.at("counters").at("transformer").at("quantization");
    EXPECT_EQ(q.at("method"), "gguf") << q.dump();
    EXPECT_GT(q.at("formats").value("Q4_K", 0), 0) << q.dump();
    EXPECT_LT(q.at("stored_bytes").get<std::uint64_t>(), q.at("dense_bytes").get<std::uint64_t>()) << q.dump();
    const auto & folder_q = folder.report.at("counters").at("transformer").at("quantization");
    EXPECT_EQ(q.at("formats"), folder_q.at("formats"));
    EXPECT_FALSE(folder.report.at("identity").at("checkpoint").at("identity").at("components").at("transformer").contains(
        "replaced_by"));
}

TEST(Qi21ComponentFile, AnotherModelsFileIsRefusedWithExit2NamingItsTensors) {
    const auto r = run("foreign", base(kDir / "gguf_single") + "--transformer " + quoted(kDir / "gguf_foreign.gguf"));
    EXPECT_EQ(r.exit_code, 2) << r.log;
    EXPECT_NE(r.log.find("gguf_foreign.gguf"), std::string::npos) << r.log;
    EXPECT_NE(r.log.find("are not Qwen-Image 2.1 transformer"), std::string::npos) << r.log;
    EXPECT_EQ(r.report.value("exit_code", -1), 2) << r.report.dump().substr(0, 400);
}

TEST(Qi21ComponentFile, AFileForAComponentTheRunDoesNotReadIsRefused) {
    const auto r = run("unused", base(kDir / "gguf_q4_k") + "--text-encoder " + quoted(kDir / "gguf_foreign.gguf"));
    EXPECT_EQ(r.exit_code, 2) << r.log;
    EXPECT_NE(r.log.find("--text-encoder"), std::string::npos) << r.log;
    EXPECT_NE(r.log.find("does not read the text_encoder"), std::string::npos) << r.log;
}

TEST(Qi21ComponentFile, ATruncatedFileIsARuntimeFailureNamingIt) {
    const auto dir = fs::temp_directory_path() / ("ddo_component_file_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto cut = dir / "cut.gguf";
    fs::copy_file(kDir / "gguf_q4_k_comfy.gguf", cut, fs::copy_options::overwrite_existing);
    fs::resize_file(cut, fs::file_size(cut) - 100);
    const auto r = run("truncated", base(kDir / "gguf_single") + "--transformer " + quoted(cut));
    EXPECT_EQ(r.exit_code, 4) << r.log;
    EXPECT_NE(r.log.find("cut.gguf"), std::string::npos) << r.log;
    EXPECT_EQ(r.report.value("status", ""), "failed") << r.report.dump().substr(0, 400);
    fs::remove_all(dir);
}

// Bad input, issue 26: the scaled-fp8 transformer with one weight_scale dropped, given as the transformer's file. Read
// as an unscaled cast that weight would be off by its scale (a white image, no error): exit 4 naming the file and the
// tensor, nothing computed, the report written.
TEST(Qi21ComponentFile, AFileWithAScaleDroppedIsRefusedNamingTheTensor) {
    const auto src = ddo::store::SafetensorsFile::open(kDir / "fp8_scaled" / "transformer" / "diffusion_pytorch_model.safetensors");
    std::vector<ddo::bench::RawTensor> kept;
    std::string dropped;
    for (const auto & t : src.tensors()) {
        if (dropped.empty() && t.name.ends_with(".weight_scale")) {
            dropped = t.name;
            continue;
        }
        ddo::bench::RawTensor r{t.name, std::string(ddo::store::dtype_name(t.dtype)), t.shape, std::vector<unsigned char>(t.nbytes)};
        src.read_tensor(t, r.bytes.data(), ddo::store::ReadMode::pread);
        kept.push_back(std::move(r));
    }
    ASSERT_FALSE(dropped.empty());
    const auto file = fs::temp_directory_path() / ("ddo_dropped_scale_" + std::to_string(::getpid()) + ".safetensors");
    ddo::bench::write_safetensors(file, kept);
    const auto r = run("dropped_scale", base(kDir / "gguf_single") + "--transformer " + quoted(file));
    fs::remove(file);
    EXPECT_EQ(r.exit_code, 4) << r.log;
    const std::string weight = dropped.substr(0, dropped.size() - std::string("_scale").size());
    EXPECT_NE(r.log.find("fp8 tensor " + weight + " has no"), std::string::npos) << r.log;
    EXPECT_NE(r.log.find(file.filename().string()), std::string::npos) << r.log;
    ASSERT_TRUE(r.report.is_object()) << "no report written";
    EXPECT_EQ(r.report.at("exit_code"), 4);
    EXPECT_EQ(r.report.at("status"), "failed");
}

namespace {

// A copy of the checkpoint `model` in `dst` whose transformer weights lack the stored tensor `drop`.
void copy_without(const fs::path & model, const fs::path & dst, const std::string & drop) {
    fs::remove_all(dst);
    fs::copy(model, dst, fs::copy_options::recursive);
    const auto file = dst / "transformer" / "diffusion_pytorch_model.safetensors";
    const auto src = ddo::store::SafetensorsFile::open(file);
    std::vector<ddo::bench::RawTensor> kept;
    for (const auto & t : src.tensors()) {
        if (t.name == drop) continue;
        ddo::bench::RawTensor r{t.name, std::string(ddo::store::dtype_name(t.dtype)), t.shape, std::vector<unsigned char>(t.nbytes)};
        src.read_tensor(t, r.bytes.data(), ddo::store::ReadMode::pread);
        kept.push_back(std::move(r));
    }
    fs::remove(file);
    ddo::bench::write_safetensors(file, kept);
}

}  // namespace

// Issue 40 item 1: an SDNQ float8 transformer (diffusers' SDNQConfig, weights_dtype float8_e4m3fn) with one layer's
// .scale removed ran with exit 0, that layer read as a plain FP8 cast (an image 164/255 away). Exit 4 naming the file
// and the missing tensor, nothing computed, the report written; the same for an int8 layer, whose message said
// "dtype I8, expected a floating type".
TEST(Qi21ComponentFile, AnSdnqLayerWithoutItsScaleIsRefusedNamingTheFileAndTheTensor) {
    const std::string layer = "transformer_blocks.0.attn.to_q";
    for (const std::string c : {"sdnq_fp8", "sdnq_int8"}) {
        const auto dir = fs::temp_directory_path() / ("ddo_sdnq_no_scale_" + c + "_" + std::to_string(::getpid()));
        copy_without(kDir / c, dir, layer + ".scale");
        const auto r = run("no_scale_" + c, base(dir));
        EXPECT_EQ(r.exit_code, 4) << c << ": " << r.log;
        EXPECT_NE(r.log.find(layer + ".scale is missing"), std::string::npos) << c << ": " << r.log;
        EXPECT_NE(r.log.find((dir / "transformer" / "diffusion_pytorch_model.safetensors").string()), std::string::npos) << r.log;
        EXPECT_EQ(r.log.find("expected a floating type"), std::string::npos) << r.log;
        ASSERT_TRUE(r.report.is_object()) << "no report written";
        EXPECT_EQ(r.report.at("exit_code"), 4);
        EXPECT_EQ(r.report.at("status"), "failed");
        EXPECT_TRUE(r.report.at("steps").empty()) << "steps ran on a damaged checkpoint";
        fs::remove_all(dir);
    }
}

// Issue 40 item 3: the same int8 values stored in sdnq's two layouts (plain, and the quantized-matmul layout whose
// weights are [in, out]) make the same image, 0/255, on the resident and the disk routes.
TEST(Qi21ComponentFile, BothSdnqStorageLayoutsMakeTheSameImage) {
    for (const std::string route : {"resident", "disk"}) {
        std::vector<uint8_t> plain, qmm;
        const std::string set = "--set components.transformer.route=" + route + " ";
        const auto a = run("layout_plain_" + route, base(kDir / "sdnq_int8") + set, &plain);
        const auto b = run("layout_qmm_" + route, base(kDir / "sdnq_int8_qmm") + set, &qmm);
        ASSERT_EQ(a.exit_code, 0) << a.log;
        ASSERT_EQ(b.exit_code, 0) << b.log;
        ASSERT_EQ(plain.size(), qmm.size());
        int worst = 0;
        for (std::size_t i = 0; i < plain.size(); ++i) worst = std::max(worst, std::abs(int(plain[i]) - int(qmm[i])));
        EXPECT_EQ(worst, 0) << route << ": the quantized-matmul layout's image is " << worst << "/255 away";
    }
}
