// A LoRA adapter file read into one canonical form (issue 27; ../shared/research/quantization-lora.md §6): for each
// adapted Linear module its down factor A [rank, in], its up factor B [out, rank], its alpha when the file has one,
// and the component the key names. Torch-free: the factors stay TensorInfos of the file until a model reads them.
//
// Key families read (prefix, then module path, then suffix):
//   prefixes  transformer. | diffusion_model. | model.diffusion_model. (ComfyUI, Lightricks' originals) -> transformer;
//             text_encoder. -> text_encoder; connectors. -> connectors; lora_unet_ / lycoris_ (kohya, LyCORIS:
//             dots flattened to '_') -> transformer; lora_te_ / lora_te1_ -> text_encoder; none: the component the
//             user names.
//   suffixes  .lora_A.weight .lora_down.weight .lora.down.weight _lora.down.weight .lora_linear_layer.down.weight
//             .lora_A.default.weight .lora_A (and the B / up forms); .alpha.
// Refused naming the key (exit 2): LoHa (hada_*), LoKr (lokr_*), DoRA (dora_scale), LoCon's mid factor, full-weight
// diffs (.diff, .diff_b), a key of no family (the file is not a LoRA), a module with A and no B or B and no A, and
// peft metadata this reader does not apply (alpha_pattern / rank_pattern). Note [LoRA files] in docs/architecture.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddo/store/safetensors_file.hpp"
#include "ddo/store/tensor_info.hpp"

namespace ddo::store {

struct LoraLayer {
    std::string component;   // "transformer", "text_encoder", "connectors"; empty: the key named none
    std::string module;      // the module path as the key spells it: dotted, or flattened (kohya) when `flattened`
    bool flattened = false;  // dots were turned into '_': resolved against the model's module names by match_lora
    std::string key;         // the down factor's key, for messages
    const TensorInfo * down = nullptr;  // A [rank, in]
    const TensorInfo * up = nullptr;    // B [out, rank]
    std::optional<double> alpha;        // the module's .alpha, else the file's lora_adapter_metadata lora_alpha
    std::int64_t rank = 0;              // down's rows
    bool rslora = false;                // lora_adapter_metadata use_rslora: alpha / sqrt(rank)

    // The factor the product B·A is added with: strength · alpha / rank (sqrt(rank) with rslora) when the file gives
    // an alpha, else strength -- diffusers 0.42.1's rule for every key family (ComfyUI's too; older diffusers
    // ignored the alpha of lora_A/lora_B files).
    double scale(double strength) const;
};

class LoraFile {
public:
    // Opens and validates `path` (a .safetensors; the header as SafetensorsFile checks it). Throws UsageError
    // naming the file and key for what is not a LoRA this reader applies (above), RuntimeError for a file that
    // cannot be read or an alpha that is not one finite number.
    static LoraFile open(const std::filesystem::path & path);

    const std::filesystem::path & path() const noexcept { return path_; }
    const SafetensorsFile & file() const noexcept { return *file_; }
    const std::vector<LoraLayer> & layers() const noexcept { return layers_; }
    // The key families seen, for the report: "diffusers/PEFT", "kohya", "ComfyUI", "bare" joined by "+".
    const std::string & format() const noexcept { return format_; }

private:
    std::filesystem::path path_;
    std::shared_ptr<SafetensorsFile> file_;
    std::vector<LoraLayer> layers_;
    std::string format_;
};

struct LoraMatch {
    std::vector<std::pair<const LoraLayer *, std::string>> matched;  // a layer and the model module it adapts
    std::vector<std::string> unmatched;                              // the file's modules that adapt nothing
    // "3 of 40 modules match nothing in <component> (first: a, b, c); 37 matched"
    std::string describe(std::string_view component, std::size_t first = 5) const;
};

// The layers of `lora` for `component` (and those with no component when `bare_is_component`) matched against the
// component's Linear modules (`modules`: module path -> its weight's shape [out, in]). A flattened name matches the
// module whose dots-to-'_' spelling it is; `rename` (a model's name table: an original module path -> the model's,
// nullopt when it has none) is tried when the name matches nothing as spelled. Throws RuntimeError (exit 4) naming
// the module, the file and both shapes when a factor's shape does not fit its module; UsageError when two of the
// component's modules flatten to the same name.
LoraMatch match_lora(const LoraFile & lora, std::string_view component, bool bare_is_component,
                     const std::map<std::string, std::vector<std::int64_t>> & modules,
                     const std::function<std::optional<std::string>(std::string_view)> & rename = {});

}  // namespace ddo::store
