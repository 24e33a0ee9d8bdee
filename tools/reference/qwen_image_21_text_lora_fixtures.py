#!/usr/bin/env python3
"""Text-encoder LoRA parity fixtures for qwen_image_21 from a prompt (issue 27; Note [LoRA files]).

Usage: qwen_image_21_text_lora_fixtures.py OUT_DIR

The checkpoint ddo-host runs from a prompt (qwen_image_21_text_fixtures.py's builders: the tiny Qwen3-VL text
encoder, its processor, the transformer with context_in_dim = the text hidden size, the VAE; saved whole), a LoRA made
with peft on that text encoder's language model, and the images diffusers' QwenImage21Pipeline makes from the prompt
with it (peft's runtime y = base(x) + weight * alpha / rank * B(A(x)), nothing fused).

Text-encoder LoRA "te_lora" (peft LoraConfig r 4, lora_alpha 8: scale alpha / rank = 2; init_lora_weights=False, the
factors then drawn from one fixed torch seed, fp32): every decoder layer's self_attn.q_proj / k_proj / v_proj / o_proj
and mlp.gate_proj / up_proj / down_proj of model.language_model (the tower the pipeline's encode_prompt runs; the
vision tower is not adapted). The module paths are the text encoder's own tensor names (text_encoder/
model.safetensors: model.language_model.layers.<i>.<...>.weight), which are also transformers' in-memory module names
(asserted). Two files from the same factors:
  te_lora.peft.safetensors   diffusers' writer (LoraBaseMixin._save_lora_weights, as save_lora_weights(
                             text_encoder_lora_layers=...) of the pipelines that load text-encoder LoRAs):
                             text_encoder.<module>.lora_A.weight [r, in] / .lora_B.weight [out, r]; the alpha only in
                             the safetensors metadata "lora_adapter_metadata", peft's LoraConfig.to_dict() under the
                             component prefix ("text_encoder.r": 4, "text_encoder.lora_alpha": 8, ...;
                             _pack_dict_with_prefix). No .alpha tensors.
  te_lora.kohya.safetensors  lora_te_<module with "." -> "_">.lora_down.weight / .lora_up.weight and .alpha (0-d
                             fp32, 8)
The reference loads te_lora.peft.safetensors back as diffusers loads a LoRA into a model: lora_state_dict with its
metadata, the LoraConfig from that metadata (_create_lora_config), peft's inject_adapter_in_model +
set_peft_model_state_dict, the weight set by set_adapters_for_text_encoder (peft's set_scale). diffusers' own
text-encoder loader (_load_lora_into_text_encoder) hands over to transformers' load_adapter, which refuses the venv's
peft 0.21.2 (transformers 5.24 asks for peft >= 0.22), and QwenImage21Pipeline.load_lora_weights loads the
transformer only. The script asserts every targeted module got the adapter with scaling 0.7 * 8 / 4, and that the
prompt embeddings equal those of the factors injected directly with peft (the file round trip).
Transformer LoRA "lora_a": qwen_image_21_lora_fixtures.py's lora_a (make_lora / write_lora: same spec, seed and
factors; the targeted modules' shapes do not depend on context_in_dim, asserted by comparing with the factors made on
qwen_image_21_fixtures.py's transformer), written as lora_a.{peft,kohya,comfyui}.safetensors; loaded by
QwenImage21Pipeline.load_lora_weights + set_adapters.

Runs (reference.json "runs"): QwenImage21Pipeline(prompt=...) on checkpoint/, the "plain" run of
qwen_image_21_text_fixtures.py (tests/e2e/qwen_image_21_text_test.cpp runs it): the CJK prompt, no negative,
true_cfg_scale 1, 2 steps, 64 x 64, seed 0 (torch.Generator().manual_seed(0)), use_kv_cache true:
  none   no LoRA
  te     te_lora at 0.7 on the text encoder
  both   te_lora at 0.7 on the text encoder and lora_a at 0.7 on the transformer
ddo-host flags for each run in reference.json "ddo_host" (the e2e's args_of; paths relative to OUT_DIR).

Checks (reference.json "checks"; the script fails when one does not hold): te_lora changes the image (max uint8 pixel
difference none vs te > 10; the largest change of the prompt embeddings is recorded); lora_a changes it further (te vs
both > 10); the file round trip (the peft file loaded as above gives the embeddings of the injected factors, exactly).

Files written:
  checkpoint/                  the whole pipeline as qwen_image_21_text_fixtures.py writes it (model_index.json,
                               scheduler/, text_encoder/, processor/, transformer/, vae/; fp32)
  te_lora.{peft,kohya}.safetensors, lora_a.{peft,kohya,comfyui}.safetensors   the LoRAs above
  pipeline.safetensors         "<run>.pixels" uint8 [H, W, C] (output_type="np" rounded as numpy_to_pil),
                               "<run>.latents" (after the last step) and "<run>.prompt_embeds" [1, L, 16]
                               (encode_prompt)
  reference.json               written last: versions, run, ddo-host flags, loras, checks
"""

import copy
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import diffusers
import peft
import transformers
from diffusers import QwenImage21Pipeline, QwenImage21Transformer2DModel
from diffusers.loaders.lora_base import set_adapters_for_text_encoder
from diffusers.utils.peft_utils import _create_lora_config
from peft import LoraConfig, inject_adapter_in_model
from peft.tuners.lora import LoraLayer
from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict

sys.path.insert(0, str(Path(__file__).resolve().parent))
import qwen_image_21_fixtures as q21  # noqa: E402
import qwen_image_21_lora_fixtures as q21l  # noqa: E402
import qwen_image_21_text_fixtures as q21t  # noqa: E402

SEED = q21t.SEED
# qwen_image_21_text_fixtures.py's "plain" run (pipeline_fixtures), as the e2e test runs it.
RUN = dict(prompt=q21t.PROMPTS["cjk"], negative_prompt=None, true_cfg_scale=1.0, steps=2, height=64, width=64,
           seed=SEED, use_kv_cache=True)
TE_PREFIX, KOHYA_TE_PREFIX = "text_encoder", "lora_te_"
TE_LORA = dict(rank=4, alpha=8, seed=SEED + 30,
               block=["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                      "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"])
LANGUAGE_MODEL = "model.language_model"  # Qwen3VLForConditionalGeneration's text tower, in memory and on disk
GAIN = q21l.GAIN  # B @ A entries GAIN times the base weights' (N(0, 1 / in)), as for lora_a
WEIGHT = 0.7
RUNS = {"none": dict(te=None, transformer=[]), "te": dict(te=WEIGHT, transformer=[]),
        "both": dict(te=WEIGHT, transformer=[("lora_a", WEIGHT)])}
MIN_PIXEL_CHANGE = q21l.MIN_PIXEL_CHANGE


def te_modules(text_encoder, saved):
    """The targeted module paths; each is a Linear of the model and "<module>.weight" is a saved tensor name."""
    layers = len(text_encoder.model.language_model.layers)
    names = [f"{LANGUAGE_MODEL}.layers.{i}.{m}" for i in range(layers) for m in TE_LORA["block"]]
    linear = {n for n, m in text_encoder.named_modules() if isinstance(m, torch.nn.Linear)}
    assert not [n for n in names if n not in linear], sorted(set(names) - linear)
    missing = [n for n in names if f"{n}.weight" not in saved]
    assert not missing, f"not tensor names of text_encoder/: {missing}"
    return names


def make_te_lora(text_encoder, modules):
    """peft's LoraConfig injected into a copy of the text encoder, A and B redrawn from the seed: (state dict
    <module>.lora_A.weight / .lora_B.weight, LoraConfig.to_dict(), the injected model with the adapter "te")."""
    te = copy.deepcopy(text_encoder)
    config = LoraConfig(r=TE_LORA["rank"], lora_alpha=TE_LORA["alpha"], target_modules=modules,
                        init_lora_weights=False)
    inject_adapter_in_model(config, te, adapter_name="te")
    state = get_peft_model_state_dict(te, adapter_name="te")
    assert sorted(state) == sorted(f"{m}.lora_{ab}.weight" for m in modules for ab in "AB"), sorted(state)
    g = torch.Generator().manual_seed(TE_LORA["seed"])
    for name in sorted(state):
        w = state[name]
        std = w.shape[1] ** -0.5 if ".lora_A." in name else GAIN * TE_LORA["rank"] ** -0.5
        state[name] = (torch.randn(w.shape, generator=g) * std).contiguous()
    result = set_peft_model_state_dict(te, state, adapter_name="te")
    assert not result.unexpected_keys, result.unexpected_keys
    config = config.to_dict()
    config["target_modules"] = sorted(config["target_modules"])  # a set: its order would differ between runs
    return state, config, te.eval()


def write_te_lora(out, state, config):
    QwenImage21Pipeline._save_lora_weights(str(out), lora_layers={TE_PREFIX: state},
                                           lora_metadata={TE_PREFIX: config}, weight_name="te_lora.peft.safetensors")
    kohya = {}
    for key, w in state.items():
        module, role = key.rsplit(".lora_", 1)
        flat = KOHYA_TE_PREFIX + module.replace(".", "_")
        kohya[f"{flat}.lora_{'down' if role == 'A.weight' else 'up'}.weight"] = w
        kohya[f"{flat}.alpha"] = torch.tensor(float(TE_LORA["alpha"]), dtype=torch.float32)
    save_file(kohya, str(out / "te_lora.kohya.safetensors"))


def load_te_lora(text_encoder, path, weight, modules):
    """A copy of the text encoder with the file loaded as diffusers loads a LoRA into a model (the metadata's
    LoraConfig via _create_lora_config, peft's inject_adapter_in_model + set_peft_model_state_dict), its weight set
    by set_adapters_for_text_encoder. diffusers' own text-encoder loader (_load_lora_into_text_encoder) hands over to
    transformers' load_adapter, which refuses this peft (transformers 5.24 asks for peft >= 0.22)."""
    te = copy.deepcopy(text_encoder)
    state, metadata = QwenImage21Pipeline.lora_state_dict(str(path), return_lora_metadata=True)
    assert metadata and metadata.get(f"{TE_PREFIX}.lora_alpha") == TE_LORA["alpha"], metadata
    assert all(k.startswith(f"{TE_PREFIX}.") for k in state), sorted(state)[:3]
    state = {k.removeprefix(f"{TE_PREFIX}."): v for k, v in state.items()}
    metadata = {k.removeprefix(f"{TE_PREFIX}."): v for k, v in metadata.items() if k.startswith(f"{TE_PREFIX}.")}
    config = _create_lora_config(state, None, metadata, None, is_unet=False)
    inject_adapter_in_model(config, te, adapter_name="te")
    result = set_peft_model_state_dict(te, state, adapter_name="te")
    assert not result.unexpected_keys, result.unexpected_keys
    set_adapters_for_text_encoder(["te"], te, [weight])
    want = weight * TE_LORA["alpha"] / TE_LORA["rank"]
    adapted = {n: m.scaling["te"] for n, m in te.named_modules() if isinstance(m, LoraLayer)}
    assert sorted(adapted) == sorted(modules), sorted(set(adapted) ^ set(modules))
    assert all(abs(s - want) < 1e-12 for s in adapted.values()), (adapted, want)
    return te.eval()


def run_pipeline(transformer, vae, text_encoder, processor, loras, out):
    """QwenImage21Pipeline from RUN's prompt on a copy of `transformer` with `loras` [(name, weight)] (peft files,
    load_lora_weights + set_adapters): (uint8 [H, W, C] pixels, latents after the last step, prompt embeddings)."""
    pipe = q21t.pipeline(copy.deepcopy(transformer), vae, text_encoder, processor)
    for i, (name, _) in enumerate(loras):
        pipe.load_lora_weights(str(out / f"{name}.peft.safetensors"), adapter_name=f"l{i}")
    if loras:
        pipe.set_adapters([f"l{i}" for i in range(len(loras))], adapter_weights=[w for _, w in loras])
    last = {}

    def keep_latents(pipe, i, t, tensors):
        last["latents"] = tensors["latents"].clone()
        return {}

    with torch.no_grad():
        embeds, _, _ = pipe.encode_prompt(prompt=RUN["prompt"], device="cpu")
        image = pipe(prompt=RUN["prompt"], height=RUN["height"], width=RUN["width"],
                     num_inference_steps=RUN["steps"], true_cfg_scale=RUN["true_cfg_scale"],
                     use_kv_cache=RUN["use_kv_cache"], generator=torch.Generator().manual_seed(RUN["seed"]),
                     output_type="np", callback_on_step_end=keep_latents, return_dict=False)[0]
    return (torch.from_numpy((image[0] * 255).round().astype("uint8")), last["latents"].contiguous(),
            embeds.contiguous())


def ddo_host_flags(run):
    """The e2e's args_of for RUN, plus --lora per LoRA (paths relative to OUT_DIR)."""
    flags = ["--plugin", "qwen_image", "--model", "checkpoint", "-p", RUN["prompt"], "--width", str(RUN["width"]),
             "--height", str(RUN["height"]), "--seed", str(RUN["seed"]), "--steps", str(RUN["steps"]),
             "--cfg-scale", str(RUN["true_cfg_scale"])]
    if RUNS[run]["te"] is not None:
        flags += ["--lora", f"te_lora.peft.safetensors:{RUNS[run]['te']}"]
    for name, w in RUNS[run]["transformer"]:
        flags += ["--lora", f"{name}.peft.safetensors:{w}"]
    return flags


def main():
    started = time.monotonic()
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    diffusers.utils.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", message="Already found a `peft_config` attribute")

    # 1. The checkpoint, as qwen_image_21_text_fixtures.py writes checkpoint/.
    processor = q21t.build_processor()
    text_encoder = q21t.build_text_encoder(processor.tokenizer)
    transformer, vae, transformer_config = q21t.build_denoiser()
    q21t.save_checkpoint(out / "checkpoint", transformer, vae, text_encoder, processor)
    with safe_open(str(out / "checkpoint" / "text_encoder" / "model.safetensors"), "pt") as f:
        saved = set(f.keys())

    # 2. The LoRAs.
    modules = te_modules(text_encoder, saved)
    state, config, injected = make_te_lora(text_encoder, modules)
    write_te_lora(out, state, config)
    spec_a = q21l.LORAS["lora_a"]
    state_a, config_a, modules_a = q21l.make_lora(transformer, spec_a)
    torch.manual_seed(SEED)  # qwen_image_21_fixtures.py's transformer: its shapes, not its weights, matter here
    other, _, _ = q21l.make_lora(QwenImage21Transformer2DModel(**q21.TRANSFORMER_CONFIG), spec_a)
    assert sorted(other) == sorted(state_a) and all(torch.equal(other[k], state_a[k]) for k in state_a), \
        "lora_a differs from qwen_image_21_lora_fixtures.py's"
    q21l.write_lora(out, "lora_a", state_a, config_a, spec_a)

    # 3. The runs. The text encoder with the file loaded by diffusers at 0.7 (the injected copy at 0.7 must give the
    # same embeddings: the file round trip).
    te_loaded = load_te_lora(text_encoder, out / "te_lora.peft.safetensors", WEIGHT, modules)
    set_adapters_for_text_encoder(["te"], injected, [WEIGHT])
    tensors, checks = {}, {}
    for run, r in RUNS.items():
        te = te_loaded if r["te"] is not None else text_encoder
        tensors[f"{run}.pixels"], tensors[f"{run}.latents"], tensors[f"{run}.prompt_embeds"] = run_pipeline(
            transformer, vae, te, processor, r["transformer"], out)
    with torch.no_grad():
        direct, _, _ = q21t.pipeline(transformer, vae, injected.eval(), processor).encode_prompt(
            prompt=RUN["prompt"], device="cpu")
    assert torch.equal(direct, tensors["te.prompt_embeds"]), "te_lora.peft.safetensors through diffusers' loader " \
        "differs from the factors injected with peft"
    diff = {f"{a}_{b}": q21l.max_pixel_diff(tensors[f"{a}.pixels"], tensors[f"{b}.pixels"])
            for a, b in (("none", "te"), ("te", "both"), ("none", "both"))}
    assert diff["none_te"] > MIN_PIXEL_CHANGE, f"te_lora at {WEIGHT} changes the image by {diff['none_te']}"
    assert diff["te_both"] > MIN_PIXEL_CHANGE, f"lora_a at {WEIGHT} changes the te image by {diff['te_both']}"
    embeds_change = float((tensors["none.prompt_embeds"] - tensors["te.prompt_embeds"]).abs().max())
    checks["lora_changes_image"] = dict(max_pixel_diff=diff, min_required=MIN_PIXEL_CHANGE,
                                        max_prompt_embeds_diff_none_te=embeds_change)
    checks["peft_file_round_trip"] = dict(embeds_equal_to_injected=True, adapted_modules=len(modules),
                                          scaling=WEIGHT * TE_LORA["alpha"] / TE_LORA["rank"])

    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "pipeline.safetensors"),
              metadata={"reference": "diffusers"})
    ref = {
        "reference": "diffusers", "reference_version": diffusers.__version__,
        "transformers_version": transformers.__version__, "peft_version": peft.__version__,
        "torch_version": torch.__version__, "numpy_version": np.__version__, "seed": SEED, "dtype": "float32",
        "text_config": q21t.TEXT_CONFIG, "transformer_config": transformer_config,
        "run": RUN,
        "runs": {run: dict(text_encoder_lora=[["te_lora", r["te"]]] if r["te"] is not None else [],
                           transformer_loras=[[n, w] for n, w in r["transformer"]]) for run, r in RUNS.items()},
        "ddo_host": {"flags": {run: ddo_host_flags(run) for run in RUNS},
                     "kohya_te_lora": f"te_lora.kohya.safetensors:{WEIGHT}",
                     "e2e": "tests/e2e/qwen_image_21_text_test.cpp args_of(pipeline_runs.plain); the e2e adds "
                            "--preset (off.toml, low_ram_safe.toml), --output and --report"},
        "loras": {
            "te_lora": dict(component="text_encoder", rank=TE_LORA["rank"], alpha=TE_LORA["alpha"],
                            scale=TE_LORA["alpha"] / TE_LORA["rank"], modules=len(modules), targets=TE_LORA["block"],
                            module_prefix=f"{LANGUAGE_MODEL}.layers.<i>.", module_names=modules, seed=TE_LORA["seed"],
                            gain=GAIN, alpha_in_files={"peft": "lora_adapter_metadata text_encoder.lora_alpha",
                                                       "kohya": ".alpha tensors"},
                            keys={"peft": "text_encoder.<module>.lora_A.weight / .lora_B.weight",
                                  "kohya": "lora_te_<module with . -> _>.lora_down.weight / .lora_up.weight / .alpha"}),
            "lora_a": dict(component="transformer", rank=spec_a["rank"], alpha=spec_a["alpha"],
                           scale=spec_a["alpha"] / spec_a["rank"], modules=len(modules_a),
                           targets=spec_a["block"] + spec_a["top"], seed=spec_a["seed"],
                           same_as="qwen_image_21_lora_fixtures.py lora_a (factors equal, asserted)"),
        },
        "checks": checks,
        "files": {"checkpoint": "checkpoint", "pipeline": "pipeline.safetensors",
                  "lora": ["te_lora.peft.safetensors", "te_lora.kohya.safetensors", "lora_a.peft.safetensors",
                           "lora_a.kohya.safetensors", "lora_a.comfyui.safetensors"]},
    }
    # Written last: its presence marks a complete fixture set.
    (out / "reference.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
    print(f"qwen_image_21_text_lora fixtures: diffusers {diffusers.__version__}, transformers "
          f"{transformers.__version__}, peft {peft.__version__} -> {out} ({time.monotonic() - started:.1f} s); "
          f"max pixel diff none/te {diff['none_te']}, te/both {diff['te_both']}")


if __name__ == "__main__":
    sys.exit(main())
