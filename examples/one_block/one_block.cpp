// one_block: the smallest model plugin — model math only, everything else from the model kit (ddo/model/).
//
// The model: one residual MLP block applied per pixel, `steps` times, to seeded noise:
//   x0 ~ randn(1, C, H, W)   (CPU generator seeded like torch.Generator().manual_seed(seed))
//   x <- x + (1 / steps) * fc2(silu(fc1(x)))     over the channel axis of every pixel
//   image = sigmoid(x)  ->  a C-channel PNG (C = 1, 3 or 4)
// Checkpoint (diffusers layout, written by reference.py): model_index.json, block/config.json
// {"channels": C, "hidden": N}, block/diffusion_pytorch_model.safetensors with block.fc1.{weight,bias},
// block.fc2.{weight,bias}. reference.py computes the same image with PyTorch to compare against.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "ddo/error.hpp"
#include "ddo/model/plugin_entry.hpp"

namespace {

struct Config {
    int64_t channels = 3, hidden = 8;
};

Config read_config(const std::filesystem::path & file) {
    std::ifstream in(file);
    if (!in) throw ddo::RuntimeError(file.string() + ": missing; point --model at a one_block checkpoint (reference.py make DIR)");
    const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("channels") || !j.contains("hidden"))
        throw ddo::RuntimeError(file.string() + ": expected {\"channels\": C, \"hidden\": N}");
    Config c{j["channels"].get<int64_t>(), j["hidden"].get<int64_t>()};
    if (c.channels < 1 || c.channels > 4) throw ddo::RuntimeError(file.string() + ": channels must be 1 to 4");
    return c;
}

void run_one_block(ddo::model::ModelRun & run) {
    const auto w = run.workload({.width = 32, .height = 32, .steps = 4, .seed = 0});
    const at::Device device = run.device().device();
    run.record_workload({{"model", "one_block"}, {"width", w.width}, {"height", w.height}, {"steps", w.steps},
                         {"seed", w.seed}, {"dtype", c10::toString(w.dtype)}, {"device", device.str()}});

    run.begin_phase("load");
    const auto cfg = read_config(run.model_dir() / "block" / "config.json");
    run.record_checkpoint({"block"});
    const ddo::model::GroupSpec block{"block", {"block.fc1.weight", "block.fc1.bias", "block.fc2.weight", "block.fc2.bias"}};
    auto weights = run.open_weights(run.plan("block"), run.model_dir() / "block", {block}, w.dtype);
    if (run.dry_run()) return;

    run.begin_phase("denoise");
    auto gen = at::make_generator<at::CPUGeneratorImpl>(w.seed);
    auto x = at::randn({1, cfg.channels, w.height, w.width}, gen, at::TensorOptions().dtype(w.dtype)).to(device);
    for (int i = 0; i < w.steps; ++i) {
        run.check_interrupted("at step " + std::to_string(i));
        const auto & t = weights->acquire(0);
        auto pixels = x.permute({0, 2, 3, 1});  // [1, H, W, C]
        auto h = at::silu(at::linear(pixels, t.at("block.fc1.weight"), t.at("block.fc1.bias")));
        auto y = at::linear(h, t.at("block.fc2.weight"), t.at("block.fc2.bias"));
        x = x + y.permute({0, 3, 1, 2}) / double(w.steps);
        weights->release(0);
        run.step(i + 1, w.steps);
    }
    run.unload(std::move(weights));

    run.begin_phase("write");
    run.write_images(at::sigmoid(x));
}

const char * const kAliases[] = {nullptr};
const char * const kComponents[] = {"block", nullptr};
const char * const kOptions[] = {nullptr};
const char * const kPipelineClasses[] = {"OneBlockExample", nullptr};

constexpr ddo::model::PluginDefinition kPlugin{
    "one_block", "0.1.0", kAliases, "example: one residual MLP block per pixel (examples/one_block)",
    kComponents, kOptions, run_one_block, kPipelineClasses,
};

}  // namespace

DDO_MODEL_PLUGIN(kPlugin)
