#!/usr/bin/env python3
"""LoRA parity fixtures for the qwen_image_21 model plugin (issue 27; Note [LoRA files], quantization-lora.md §6).

Usage: qwen_image_21_lora_fixtures.py OUT_DIR

The tiny Qwen-Image 2.1 checkpoint of qwen_image_21_fixtures.py (its build_models, same seed: the model the e2e tests
run), two LoRAs made with peft on its transformer, each written in the three key families ddo reads, and the images
diffusers' QwenImage21Pipeline makes with them (load_lora_weights + set_adapters: peft's runtime
y = base(x) + weight * alpha / rank * B(A(x)) per adapter, nothing fused).

LoRAs (peft LoraConfig on the transformer, factors then drawn from one fixed torch seed, fp32):
  lora_a   rank 4, lora_alpha 8 (scale alpha / rank = 2): every block's attn.to_q, attn.to_k, attn.to_v,
           attn.to_out.0, img_mlp.proj, img_mlp.gate_layer, img_mlp.out, plus img_in and proj_out
  lora_b   rank 2, lora_alpha = rank (peft's default, scale 1): every block's attn.to_q and attn.to_v
Each in three files from the same factors:
  <lora>.peft.safetensors     diffusers' writer, QwenImage21Pipeline.save_lora_weights(transformer_lora_layers=
                              get_peft_model_state_dict(...), transformer_lora_adapter_metadata=LoraConfig.to_dict()):
                              transformer.<module>.lora_A.weight [r, in] / .lora_B.weight [out, r]; the config lives in
                              the safetensors metadata "lora_adapter_metadata" as JSON whose keys carry the component
                              prefix ("transformer.r", "transformer.lora_alpha", ...; diffusers' _pack_dict_with_prefix,
                              removed again by load_lora_adapter). lora_b's lora_alpha there is 2 (= its rank).
  <lora>.kohya.safetensors    lora_unet_<module with "." -> "_">.lora_down.weight / .lora_up.weight and .alpha (0-d
                              fp32; lora_b's alpha = its rank, as kohya always writes one)
  <lora>.comfyui.safetensors  diffusion_model.<module>.lora_A.weight / .lora_B.weight, and for lora_a
                              diffusion_model.<module>.alpha (0-d fp32); lora_b without alpha
The quantized case gguf_q4k needs a wider transformer (Q4_K rows are 256 wide; the tiny one's are 32), so lora_a_wide
and lora_b_wide are the same two configs made the same way on qwen_image_21_quant_fixtures.py's wide transformer
(attention_head_dim 128), written in the same three families.

Runs (reference.json "runs"): QwenImage21Pipeline on checkpoint/ from prompt_embeds.safetensors (no negative,
true_cfg_scale 1), 2 steps, 64 x 64, seed 0 (torch.Generator().manual_seed(0)), use_kv_cache true: "none" without
LoRA, "one" with lora_a.peft at 0.7, "two" with lora_a.peft at 0.7 and lora_b.peft at 1.3 (set_adapters(names,
adapter_weights)). The script asserts that "none" and "one" differ by more than 10 in some uint8 pixel.

Quantized cases (reference.json "quant_cases"), the transformer quantized as qwen_image_21_quant_fixtures.py writes it
(its functions), the reference being diffusers on the dequantized weights plus the same LoRAs through
load_lora_weights (runs "none" and "two"):
  sdnq_uint4  checkpoint_uint4/: sdnq 0.2.8 uint4 + SVD rank 4 of the tiny transformer (sdnq_case, "sdnq_uint4_svd");
              the dense weights are each SDNQ layer's own sdnq_dequantizer decode after diffusers' from_pretrained
  gguf_q4k    checkpoint_q4k/: the wide transformer as gguf-py writes the "gguf_q4_k" case (Q4_K block weights, Q8_0
              the rest of the 32-multiples, F16 proj_out, F32 others) in transformer/diffusion_pytorch_model.gguf
              beside its config.json; the dense weights are gguf-py's decode of the written file; LoRAs *_wide

Checks (reference.json "checks"; the script fails when one does not hold):
  lora_changes_image     the largest uint8 difference between "none" and "one" is over 10
  <family>.<run>         kohya / ComfyUI files loaded by diffusers (lora_state_dict's
                         _convert_non_diffusers_qwen_lora_to_diffusers) against the peft files, runs one and two: the
                         ComfyUI files give the same pixels; the kohya files are accepted but diffusers un-flattens
                         img_mlp_gate_layer as img_mlp.gate.layer (gate_layer is not among its protected n-grams), so
                         peft drops those two layers with a logged "unexpected keys" warning: recorded under
                         "dropped_by_diffusers", and the check is that the pixels equal the ComfyUI files' less those
                         layers (the rest of the kohya file, alphas included, loads as the peft file does)
  <case>.dense_vs_diffusers_integration  the dense reference against diffusers' own quantized integration
                         (from_pretrained's SDNQ layers; from_single_file with GGUFQuantizationConfig(float32)), peft's
                         LoRAs on the quantized layers for "two": "none" within 1 (asserted), "two" recorded
The peft loads also assert that peft's scaling is weight * alpha / rank (the alpha read from the metadata).

Files written:
  checkpoint/                 tiny diffusers checkpoint (model_index.json, transformer/, vae/, scheduler/; fp32)
  checkpoint_uint4/           the same with transformer/ quantized by sdnq (save_sdnq_model)
  checkpoint_q4k/             the same with transformer/ = wide config.json + diffusion_pytorch_model.gguf
  prompt_embeds.safetensors   prompt_embeds/_mask + negative_prompt_embeds/_mask, as qwen_image_21_fixtures.py
                              writes them (the ddo-host --prompt-embeds input)
  lora_{a,b}{,_wide}.{peft,kohya,comfyui}.safetensors   the LoRAs above
  pipeline.safetensors        "<run>.pixels" uint8 [H, W, 4] (output_type="np" rounded as numpy_to_pil) and
                              "<run>.latents" (output_type="latent") for none, one, two; "<case>.none.*" and
                              "<case>.two.*" for the quantized cases
  reference.json              written last: versions, seed, configs, runs, formats, loras, quant_cases, checks
"""

import copy
import importlib.metadata
import json
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("SDNQ_USE_TORCH_COMPILE", "0")  # sdnq's eager path (no Triton here), before sdnq is imported

import numpy as np
import torch
from safetensors.torch import load_file, save_file

import diffusers
import peft
from diffusers import (FlowMatchEulerDiscreteScheduler, GGUFQuantizationConfig, QwenImage21Pipeline,
                       QwenImage21Transformer2DModel)
from peft import LoraConfig
from peft.utils import get_peft_model_state_dict
from sdnq.utils import get_sdnq_params

import gguf_writer
import qwen_image_21_fixtures as q21
import qwen_image_21_quant_fixtures as q21q

SEED = q21.SEED
RUN = dict(steps=2, width=64, height=64, seed=SEED, use_kv_cache=True, true_cfg_scale=1.0)
FORMATS = ["peft", "kohya", "comfyui"]
BLOCK_A = ["attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "img_mlp.proj", "img_mlp.gate_layer", "img_mlp.out"]
BLOCK_B = ["attn.to_q", "attn.to_v"]
LORAS = {  # name -> rank, lora_alpha (None: peft's default, alpha = rank), per-block modules, top-level modules, seed
    "lora_a": dict(rank=4, alpha=8, block=BLOCK_A, top=["img_in", "proj_out"], seed=SEED + 20),
    "lora_b": dict(rank=2, alpha=None, block=BLOCK_B, top=[], seed=SEED + 21),
}
# Factor magnitudes: A ~ N(0, 1 / in), B ~ N(0, GAIN^2 / rank), so B @ A has entries of GAIN times the base weights'
# (N(0, 1 / in)): lora_a at 0.7 moves every targeted weight by about 0.7 * 2 * GAIN of its size.
GAIN = 0.35
RUNS = {"none": [], "one": [("lora_a", 0.7)], "two": [("lora_a", 0.7), ("lora_b", 1.3)]}
QUANT_RUNS = ("none", "two")
KOHYA_PREFIX, COMFY_PREFIX = "lora_unet_", "diffusion_model."
MIN_PIXEL_CHANGE = 10


def modules_of(transformer, spec):
    blocks = len(transformer.transformer_blocks)
    names = [f"transformer_blocks.{i}.{m}" for i in range(blocks) for m in spec["block"]] + spec["top"]
    linear = {n for n, m in transformer.named_modules() if isinstance(m, torch.nn.Linear)}
    missing = [n for n in names if n not in linear]
    assert not missing, f"not Linear modules of QwenImage21Transformer2DModel: {missing}"
    return names


def make_lora(transformer, spec):
    """peft's LoraConfig injected into a copy of `transformer`; A and B redrawn from spec's seed. Returns the
    state dict get_peft_model_state_dict gives (<module>.lora_A.weight / .lora_B.weight, fp32) and the config."""
    t = copy.deepcopy(transformer)
    modules = modules_of(t, spec)
    # Without an alpha, lora_alpha = rank: what diffusers assumes for a file without alphas (scale 1).
    config = LoraConfig(r=spec["rank"], lora_alpha=spec["alpha"] or spec["rank"], target_modules=modules,
                        init_lora_weights=False)
    t.add_adapter(config, adapter_name="x")
    state = get_peft_model_state_dict(t, adapter_name="x")
    assert sorted(state) == sorted(f"{m}.lora_{ab}.weight" for m in modules for ab in "AB"), sorted(state)
    g = torch.Generator().manual_seed(spec["seed"])
    for name in sorted(state):
        w = state[name]
        std = w.shape[1] ** -0.5 if ".lora_A." in name else GAIN * spec["rank"] ** -0.5
        state[name] = (torch.randn(w.shape, generator=g) * std).contiguous()
    config = t.peft_config["x"].to_dict()
    config["target_modules"] = sorted(config["target_modules"])  # a set: its order would differ between runs
    return state, config, modules


def write_lora(out, name, state, config, spec):
    """The three files of one LoRA from the same factors."""
    QwenImage21Pipeline.save_lora_weights(str(out), transformer_lora_layers=state,
                                          transformer_lora_adapter_metadata=config,
                                          weight_name=f"{name}.peft.safetensors")
    kohya, comfy = {}, {}
    alpha = float(spec["alpha"] if spec["alpha"] is not None else spec["rank"])
    for key, w in state.items():
        module, role = key.rsplit(".lora_", 1)
        flat = KOHYA_PREFIX + module.replace(".", "_")
        kohya[f"{flat}.lora_{'down' if role == 'A.weight' else 'up'}.weight"] = w
        kohya[f"{flat}.alpha"] = torch.tensor(alpha, dtype=torch.float32)
        comfy[COMFY_PREFIX + key] = w
        if spec["alpha"] is not None:
            comfy[f"{COMFY_PREFIX}{module}.alpha"] = torch.tensor(alpha, dtype=torch.float32)
    save_file(kohya, str(out / f"{name}.kohya.safetensors"))
    save_file(comfy, str(out / f"{name}.comfyui.safetensors"))


def run_pipeline(transformer, vae, pos, pos_mask, loras, out, fmt="peft", suffix="", copy_transformer=True):
    """QwenImage21Pipeline on a copy of `transformer` (or on it: the LoRAs stay in it) with `loras` [(name, weight)]
    loaded from their `fmt` files (or [(state dict, weight)]): (uint8 [H, W, C] pixels as numpy_to_pil rounds,
    latents)."""
    transformer = copy.deepcopy(transformer) if copy_transformer else transformer
    pipe = QwenImage21Pipeline(scheduler=FlowMatchEulerDiscreteScheduler(**q21.SCHEDULER_CONFIG), vae=vae,
                               text_encoder=None, processor=q21._NoProcessor(), transformer=transformer)
    pipe.set_progress_bar_config(disable=True)
    for i, (source, _) in enumerate(loras):
        if isinstance(source, str):
            source = str(out / f"{source}{suffix}.{fmt}.safetensors")
        pipe.load_lora_weights(source, adapter_name=f"l{i}")
    if loras:
        pipe.set_adapters([f"l{i}" for i in range(len(loras))], adapter_weights=[w for _, w in loras])
    if fmt == "peft":  # the alpha came from the file's lora_adapter_metadata: peft scales by weight * alpha / rank
        for i, (source, w) in enumerate(loras):
            if isinstance(source, str):
                spec = LORAS[source]
                layer = transformer.get_submodule(f"transformer_blocks.0.{spec['block'][0]}")
                want = w * (spec["alpha"] or spec["rank"]) / spec["rank"]
                assert abs(layer.scaling[f"l{i}"] - want) < 1e-12, (source, layer.scaling, want)
    kwargs = dict(prompt_embeds=pos, prompt_embeds_mask=pos_mask, height=RUN["height"], width=RUN["width"],
                  num_inference_steps=RUN["steps"], true_cfg_scale=RUN["true_cfg_scale"],
                  use_kv_cache=RUN["use_kv_cache"])
    last = {}

    def keep_latents(pipe, i, t, tensors):  # after the last step: what output_type="latent" returns
        last["latents"] = tensors["latents"].clone()
        return {}

    with torch.no_grad():
        image = pipe(**kwargs, generator=torch.Generator().manual_seed(RUN["seed"]), output_type="np",
                     callback_on_step_end=keep_latents, return_dict=False)[0]
    return torch.from_numpy((image[0] * 255).round().astype("uint8")), last["latents"].contiguous()


def misnamed_modules(transformer, path):
    """{name diffusers' Qwen converter gives: the module meant} for the file's LoRA layers whose converted name is no
    module of the transformer (peft then drops those layers, logging "unexpected keys"); the module meant is the one
    whose dots-to-"_" spelling is the same."""
    state = QwenImage21Pipeline.lora_state_dict(str(path))
    names = {k.removeprefix("transformer.").rsplit(".lora_", 1)[0] for k in state}
    have = {n for n, _ in transformer.named_modules()}
    flat = {n.replace(".", "_"): n for n in have}
    return {n: flat.get(n.replace(".", "_")) for n in sorted(names - have)}


def max_pixel_diff(a, b):
    return int((a.int() - b.int()).abs().max())


def sdnq_dense(transformer, integration):
    """`transformer` with every SDNQ layer's weight replaced by its own decode (sdnq_dequantizer, as its forward
    dequantizes it), every other tensor taken from the loaded model."""
    state = {}
    decoded = 0
    for name, module in integration.named_modules():
        deq = getattr(module, "sdnq_dequantizer", None)
        if deq is None:
            continue
        with torch.no_grad():
            w = deq(**get_sdnq_params(module), skip_quantized_matmul=deq.use_quantized_matmul, skip_compile=True)
        state[f"{name}.weight"] = w.to(torch.float32).contiguous()
        if module.bias is not None:
            state[f"{name}.bias"] = module.bias.detach().to(torch.float32)
        decoded += 1
    dense = copy.deepcopy(transformer)
    full = dense.state_dict()
    plain = {k: v for k, v in integration.state_dict().items() if k in full and k not in state}
    dense.load_state_dict({**plain, **state}, strict=True)
    return dense.eval(), decoded


def gguf_q4k_case(out, wide):
    """checkpoint_q4k/ as qwen_image_21_quant_fixtures.py writes its gguf_q4_k case; the dense model of gguf-py's
    decode and the tensor type counts."""
    ckpt = q21q.copy_checkpoint(out, "checkpoint_q4k")
    (ckpt / "transformer").mkdir()
    wide.save_config(str(ckpt / "transformer"))
    path = ckpt / "transformer" / "diffusion_pytorch_model.gguf"
    gguf_writer.write(path, wide.state_dict(), q21q.gguf_type("gguf_q4_k"), arch="qwen_image")
    dense, types = gguf_writer.read_dense(path)
    ref = copy.deepcopy(wide)
    ref.load_state_dict(dense)
    counts = {k: sum(1 for v in types.values() if v == k) for k in sorted(set(types.values()))}
    assert counts.get("Q4_K", 0) > 0, counts
    return ref.eval(), counts


def main():
    started = time.monotonic()
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    diffusers.utils.logging.set_verbosity_error()  # the dropped kohya layers' warning is recorded in "checks"
    warnings.filterwarnings("ignore", message="Already found a `peft_config` attribute")  # a second adapter
    transformer, vae, _ = q21.build_models(out)
    g = torch.Generator().manual_seed(SEED + 4)  # qwen_image_21_fixtures.py's prompt embeddings
    pos, pos_mask = q21._embeds(g, 1, 9, 7)
    neg, neg_mask = q21._embeds(g, 1, 5, 5)
    save_file({"prompt_embeds": pos, "prompt_embeds_mask": pos_mask.to(torch.uint8),
               "negative_prompt_embeds": neg, "negative_prompt_embeds_mask": neg_mask.to(torch.uint8)},
              str(out / "prompt_embeds.safetensors"), metadata={"reference": "diffusers", "producer": __file__})

    # sdnq's SVD (torch.svd_lowrank) draws from the global generator: quantized here, right after build_models as in
    # qwen_image_21_quant_fixtures.py, the uint4 transformer is that script's sdnq_uint4_svd bytes.
    integration = q21q.sdnq_case(out, transformer, "checkpoint_uint4", q21q.SDNQ_CASES["sdnq_uint4_svd"])
    dense_uint4, decoded = sdnq_dense(transformer, integration)
    wide = q21q.gguf_transformer()
    lora_meta = {}
    for base, suffix in ((transformer, ""), (wide, "_wide")):
        for name, spec in LORAS.items():
            state, config, modules = make_lora(base, spec)
            write_lora(out, name + suffix, state, config, spec)
            alpha = spec["alpha"] or spec["rank"]
            lora_meta[name + suffix] = dict(
                rank=spec["rank"], alpha=spec["alpha"], modules=len(modules), scale=alpha / spec["rank"],
                alpha_in_files={"peft": alpha, "kohya": alpha, "comfyui": spec["alpha"]}, seed=spec["seed"],
                targets=spec["block"] + spec["top"], **({"base": "gguf_q4k's wide transformer"} if suffix else {}))

    tensors, checks = {}, {}
    for run, loras in RUNS.items():
        tensors[f"{run}.pixels"], tensors[f"{run}.latents"] = run_pipeline(transformer, vae, pos, pos_mask, loras, out)
    change = max_pixel_diff(tensors["none.pixels"], tensors["one.pixels"])
    assert change > MIN_PIXEL_CHANGE, f"lora_a at 0.7 changes the image by {change} <= {MIN_PIXEL_CHANGE}"
    checks["lora_changes_image"] = dict(max_pixel_diff_none_one=change,
                                        max_pixel_diff_one_two=max_pixel_diff(tensors["one.pixels"],
                                                                              tensors["two.pixels"]),
                                        min_required=MIN_PIXEL_CHANGE)

    # The other families through diffusers' own loader (QwenImageLoraLoaderMixin.lora_state_dict ->
    # _convert_non_diffusers_qwen_lora_to_diffusers). A layer the converter names wrongly is dropped by peft with a
    # logged warning only: then the check is that the pixels equal the ComfyUI files' without those modules.
    for fmt in FORMATS[1:]:
        lost = {name: misnamed_modules(transformer, out / f"{name}.{fmt}.safetensors") for name in LORAS}
        for run in ("one", "two"):
            key = f"{fmt}.{run}"
            try:
                pixels, latents = run_pipeline(transformer, vae, pos, pos_mask, RUNS[run], out, fmt=fmt)
            except Exception as e:  # recorded: diffusers refused the file
                checks[key] = dict(accepted=False, error=f"{type(e).__name__}: {e}"[:600])
                continue
            d = max_pixel_diff(pixels, tensors[f"{run}.pixels"])
            check = dict(accepted=True, max_pixel_diff_vs_peft=d,
                         max_latent_diff_vs_peft=float((latents - tensors[f"{run}.latents"]).abs().max()),
                         pixels_equal=d == 0)
            dropped = {n: lost[n] for n, _ in RUNS[run] if lost[n]}
            if dropped:
                # diffusers drops these layers: its image is the one of the LoRAs without them (the ComfyUI files'
                # layers less those modules, loaded as state dicts).
                check["dropped_by_diffusers"] = {n: [f"{m} (converted to {w})" for w, m in d_.items()]
                                                 for n, d_ in dropped.items()}
                kept = []
                for n, w in RUNS[run]:
                    gone = {COMFY_PREFIX + m for m in dropped.get(n, {}).values()}
                    comfy = load_file(str(out / f"{n}.comfyui.safetensors"))
                    kept.append(({k: v for k, v in comfy.items()
                                  if not any(k.startswith(g + ".") for g in gone)}, w))
                without, _ = run_pipeline(transformer, vae, pos, pos_mask, kept, out)
                check["pixels_equal_to_loras_without_dropped"] = max_pixel_diff(pixels, without) == 0
                assert check["pixels_equal_to_loras_without_dropped"], (key, check)
            else:
                assert d == 0, (key, check)
            checks[key] = check

    # Quantized cases: diffusers on the dequantized weights + the same LoRAs.
    quant_cases = {}
    q4k, gguf_types = gguf_q4k_case(out, wide)
    cases = {
        "sdnq_uint4": (dense_uint4, "", dict(checkpoint="checkpoint_uint4", sdnq=q21q.SDNQ_CASES["sdnq_uint4_svd"],
                                               sdnq_layers=decoded, transformer_config=q21.TRANSFORMER_CONFIG)),
        "gguf_q4k": (q4k, "_wide", dict(checkpoint="checkpoint_q4k", gguf_types=gguf_types,
                                         transformer_config=q21q.GGUF_TRANSFORMER_CONFIG)),
    }
    for case, (model, suffix, info) in cases.items():
        for run in QUANT_RUNS:
            tensors[f"{case}.{run}.pixels"], tensors[f"{case}.{run}.latents"] = run_pipeline(
                model, vae, pos, pos_mask, RUNS[run], out, suffix=suffix)
        info["loras"] = {run: [[n + suffix, w] for n, w in RUNS[run]] for run in QUANT_RUNS}
        change = max_pixel_diff(tensors[f"{case}.none.pixels"], tensors[f"{case}.two.pixels"])
        assert change > MIN_PIXEL_CHANGE, f"{case}: the LoRAs change the image by {change} <= {MIN_PIXEL_CHANGE}"
        info["max_pixel_diff_none_two"] = change
        quant_cases[case] = info
    # The dense references against diffusers' own quantized integrations: without LoRA (asserted equal) and with the
    # two LoRAs through peft on the quantized layers (recorded only: the reference is the dense one).
    gguf_path = out / "checkpoint_q4k" / "transformer" / "diffusion_pytorch_model.gguf"
    integrations = {
        "sdnq_uint4": (integration, ""),
        "gguf_q4k": (QwenImage21Transformer2DModel.from_single_file(
            str(gguf_path), config=str(gguf_path.parent), torch_dtype=torch.float32,
            quantization_config=GGUFQuantizationConfig(compute_dtype=torch.float32)).eval(), "_wide"),
    }
    for case, (model, suffix) in integrations.items():
        check = {}
        for run in QUANT_RUNS:  # "none" first: "two" leaves its LoRAs in the model (GGUF parameters do not deepcopy)
            try:
                pixels, latents = run_pipeline(model, vae, pos, pos_mask, RUNS[run], out, suffix=suffix,
                                               copy_transformer=False)
            except Exception as e:
                check[run] = dict(accepted=False, error=f"{type(e).__name__}: {e}"[:600])
                continue
            check[run] = dict(max_pixel_diff=max_pixel_diff(pixels, tensors[f"{case}.{run}.pixels"]),
                              max_latent_diff=float((latents - tensors[f"{case}.{run}.latents"]).abs().max()))
        assert check["none"].get("max_pixel_diff", 99) <= 1, (case, check)
        checks[f"{case}.dense_vs_diffusers_integration"] = check

    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "pipeline.safetensors"),
              metadata={"reference": "diffusers"})
    ref = {"reference": "diffusers", "reference_version": diffusers.__version__, "torch_version": torch.__version__,
           "peft_version": peft.__version__, "sdnq_version": importlib.metadata.version("sdnq"),
           "gguf_version": importlib.metadata.version("gguf"), "numpy_version": np.__version__, "seed": SEED,
           "dtype": "float32", "transformer_config": q21.TRANSFORMER_CONFIG,
           "runs": {run: dict(RUN, loras=[[n, w] for n, w in loras]) for run, loras in RUNS.items()},
           "formats": FORMATS, "loras": lora_meta, "quant_cases": quant_cases, "checks": checks,
           "files": {"pipeline": "pipeline.safetensors", "prompt_embeds": "prompt_embeds.safetensors",
                     "lora": "<lora>.<format>.safetensors"}}
    # Written last: its presence marks a complete fixture set.
    (out / "reference.json").write_text(json.dumps(ref, indent=1, default=list) + "\n")
    print(f"qwen_image_21_lora fixtures: diffusers {diffusers.__version__}, peft {peft.__version__}, "
          f"torch {torch.__version__} -> {out} ({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    sys.exit(main())
