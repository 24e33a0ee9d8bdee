// ddo-host --plugin ltx2 --transformer FILE on Lightricks' single-file layout (tools/reference/ltx2_single_file_fixtures.py;
// Note [Component files]): the transformer in the original LTX names under "model.diffusion_model.", stored as
// scaled fp8, with text-connector tensors inside the DiT prefix and a VAE tensor beside it, given to a checkpoint
// whose transformer/ holds only config.json, writes the video and audio the fp8 folder form writes, byte for byte,
// for LTX-2.0 and LTX-2.3. The names are diffusers' own converter's (checked by the fixture script).
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "e2e/host_run.hpp"

namespace fs = std::filesystem;
using ddo::test::quoted;
using ddo::test::run_ddo_host;

namespace {

const fs::path kDir = LTX2_SINGLE_FILE_FIXTURE_DIR;

std::string args(const fs::path & model) {
    return "--plugin ltx2 --preset low_ram_safe.toml --model " + quoted(model) + " --prompt-embeds " +
           quoted(kDir / "prompt_embeds.safetensors") + " --width 32 --height 32 --frames 5 --fps 25 --steps 2 ";
}

std::vector<std::string> output_hashes(const ddo::test::HostRun & r) {
    std::vector<std::string> h;
    for (const auto & o : r.report.at("outputs")) h.push_back(o.at("sha256").get<std::string>());
    return h;
}

}  // namespace

TEST(Ltx2ComponentFile, TheOriginalSingleFileEqualsTheFp8FolderForm) {
    for (const std::string v : {"20", "23"}) {
        const auto folder = run_ddo_host("ltx2_cf_folder_" + v, args(kDir / ("fp8_" + v)));
        ASSERT_EQ(folder.exit_code, 0) << folder.log;
        const auto file = run_ddo_host("ltx2_cf_file_" + v, args(kDir / ("config_" + v)) + "--transformer " +
                                                                quoted(kDir / ("ltx" + v + "_original_fp8.safetensors")));
        ASSERT_EQ(file.exit_code, 0) << file.log;
        EXPECT_EQ(output_hashes(file), output_hashes(folder)) << "LTX-" << v << ": the file form's outputs differ";
        EXPECT_EQ(output_hashes(file).size(), 2u);
        const auto & q = file.report.at("counters").at("transformer").at("quantization");
        EXPECT_EQ(q.at("formats"), folder.report.at("counters").at("transformer").at("quantization").at("formats"));
        EXPECT_GT(q.at("formats").value("FP8 E4M3 scaled", 0), 0) << q.dump();
        const auto & id = file.report.at("identity").at("checkpoint").at("identity").at("components").at("transformer");
        EXPECT_EQ(id.at("replaced_by").at("file"), fs::absolute(kDir / ("ltx" + v + "_original_fp8.safetensors")).string());
    }
}

TEST(Ltx2ComponentFile, ADiffusersNamedFileOfAnotherModelIsRefusedNamingItsTensors) {
    // LTX-2.0's transformer given to the LTX-2.3 checkpoint: tensors 2.3 does not have (caption_projection) are named.
    const auto r = run_ddo_host("ltx2_cf_other", args(kDir / "config_23") + "--transformer " +
                                                     quoted(kDir / "ltx20_original_fp8.safetensors"));
    EXPECT_EQ(r.exit_code, 2) << r.log;
    EXPECT_NE(r.log.find("are not LTX-2 transformer tensors"), std::string::npos) << r.log;
    EXPECT_NE(r.log.find("caption_projection"), std::string::npos) << r.log;
}
