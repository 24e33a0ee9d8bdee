// `ddo-host encode --plugin P --model DIR -p TEXT [-n TEXT] -o FILE`: a run whose plugin only encodes the prompt
// and writes the embeddings as safetensors (prompt_embeds, negative_prompt_embeds and their masks when padded):
// the file --prompt-embeds reads, so a prompt is encoded once and reused. Presets, --set, the report and the exit
// codes are the run's (run_command.hpp); the text encoder runs on its component plan like in a generating run.
#include <memory>

#include "command_registry.hpp"
#include "run_command.hpp"

namespace ddo::host {
namespace {

void install(CLI::App & app, HostOptions & options) {
    auto a = std::make_shared<RunArgs>();
    a->encode_only = true;
    auto * cmd = app.add_subcommand("encode", "encode a prompt with the model's text encoder and write the prompt "
                                              "embeddings file (--prompt-embeds of a later run)");
    cmd->add_option("--plugin", a->plugin, "model plugin: name or unique alias (ddo-host plugins)")->required();
    cmd->add_option("--model", a->model, "checkpoint directory (diffusers layout, with its text encoder)")->required();
    cmd->add_option("-p,--prompt", a->prompt, "prompt text")->required();
    cmd->add_option("--text-encoder", a->text_encoder, "a .safetensors or .gguf file replacing the checkpoint's text "
                                                       "encoder weights");
    cmd->add_option("-n,--negative-prompt", a->negative_prompt, "negative prompt (written as negative_prompt_embeds)");
    cmd->add_option("-o,--output-file", a->output_file, "the safetensors file to write")->required();
    cmd->add_option("--preset", a->preset, "preset name or file; default: DDO_PRESET, else auto");
    cmd->add_option("--set", a->sets, "key=value override of a preset key (repeatable; docs/presets.md)");
    cmd->add_option("--report", a->report, "report JSON path (default: beside the output file)");
    cmd->add_flag("--overwrite", a->overwrite, "replace an existing output or report");
    cmd->callback([cmd, a, &options] { options.exit_code = run_from_cli(*a, *cmd, options, {"encode"}); });
}

const RegisterCommand reg{85, install};

}  // namespace
}  // namespace ddo::host
