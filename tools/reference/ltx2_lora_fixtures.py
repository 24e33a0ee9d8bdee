#!/usr/bin/env python3
"""LoRA parity fixtures for the ltx2_video and ltx2_image model plugins (issue 27; Note [LoRA files],
../shared/research/quantization-lora.md §6): two LoRAs on each tiny transformer, written in the three layouts people
ship (diffusers/PEFT, ComfyUI, Lightricks' official), and the pipelines' outputs with none, one and two of them
applied through peft as diffusers applies them.

Usage: ltx2_lora_fixtures.py OUT_DIR

The models are the other scripts' own (their builders imported, the same seeds, so the same weights):
  video/   ltx2_pipeline_fixtures.pipeline(v23=False): the LTX-2.0 checkpoint that script writes as checkpoint_20/,
           run as its case "plain" (diffusers' LTX2Pipeline: 2 steps, no guidance, 32x32, 5 frames at 25 fps,
           seed 0, the positive prompt embeddings only, max_sequence_length 16)
  image/   ltx2_image_fixtures.components(): the LTX-2.3 image checkpoint that script writes as checkpoint/, run as
           its case "base_pag" (the composed reference compose_image: 4 linspace steps, CFG 3, rescale 0.7, PAG 0.2
           on block 1, 24x32 (width x height), seed 43), the case its ddo-host e2e test runs from prompt embeddings

The LoRAs (LORAS below; the same for both models, module lists resolved on each transformer's named_modules):
  lora_a   rank 4, lora_alpha 8 (scale alpha / rank = 2): in every block attn1.to_q/to_k/to_v/to_out.0,
           attn2.to_q/to_k/to_v/to_out.0, ff.net.0.proj, ff.net.2, and proj_in; on the video model also their audio
           counterparts audio_attn1.*, audio_attn2.*, audio_ff.* and audio_proj_in
  lora_b   rank 2, no alpha (lora_alpha = r, scale 1): attn1.to_q and attn1.to_v of every block
Each is made with peft on a fresh copy of the transformer (PeftAdapterMixin.add_adapter with a LoraConfig naming the
modules by their full paths), its factors then overwritten with fp32 normal draws from torch.Generator seeded
LORA_SEED + index (per module in sorted order, A then B: A [r, in] * A_GAIN / sqrt(in), B [out, r] * B_GAIN /
sqrt(r)), and
read back with peft's get_peft_model_state_dict. From the same factors, per model and LoRA X:
  lora_X.peft.safetensors     diffusers' writer: LTX2Pipeline.save_lora_weights(transformer_lora_layers=
                              get_peft_model_state_dict(...), transformer_lora_adapter_metadata=LoraConfig.to_dict()
                              with its sets sorted):
                              keys transformer.<module>.lora_A.weight / .lora_B.weight; the safetensors metadata
                              key "lora_adapter_metadata" holds the JSON LoraConfig with every key prefixed
                              "transformer." (r, lora_alpha, target_modules, ...), which load_lora_weights reads back
                              (peft shortens target_modules to name suffixes such as "to_q", "proj", "2": the keys,
                              not that list, name the modules). Between generations only the order of the header's
                              __metadata__ entries ("format", "lora_adapter_metadata") varies: safetensors writes
                              that map unordered
  lora_X.comfyui.safetensors  diffusion_model.<diffusers module>.lora_A.weight / .lora_B.weight, and for lora_a
                              diffusion_model.<module>.alpha (0-d fp32, 8.0); no metadata
  lora_X.ltx.safetensors      Lightricks' official layout (ltx-core, LTXV_LORA_COMFY_RENAMING_MAP): diffusion_model.
                              <ORIGINAL LTX-2 module name>.lora_A.weight / .lora_B.weight, no alpha (ltx-core applies
                              strength * B @ A), so lora_a's B is pre-multiplied by alpha / rank = 2 (exact in fp32)
                              for the same effect as the peft file; the original names are
                              ltx2_single_file_fixtures.to_original (for these modules: proj_in -> patchify_proj,
                              audio_proj_in -> audio_patchify_proj; the blocks' attn1/attn2/audio_attn1/audio_attn2/
                              ff/audio_ff, to_q/to_k/to_v/to_out.0, net.0.proj/net.2 are the same in ltx-core), checked
                              here against diffusers' _convert_non_diffusers_ltx2_lora_to_diffusers, which must give
                              back exactly the peft file's keys
All three are fp32 and rank-consistent (A [r, in], B [out, r]).

Runs (RUNS below): none; one = lora_a at 0.7; two = lora_a at 0.7 + lora_b at 1.3, both loaded from the peft files
with diffusers' load_lora_weights(adapter_name "a" / "b") and set_adapters(names, strengths): on the video model
LTX2Pipeline's own; on the image model the same LTX2LoraLoaderMixin.load_lora_weights / set_adapters on a holder of
the composed transformer given diffusers' PeftAdapterMixin (LoraImageTransformer below: ltx2_image_fixtures'
LTX2ImageTransformer2DModel plus the mixin, the plain one's state dict loaded strictly). peft runs the layers
unfused: y = W x + b + sum over adapters of strength * alpha / r * B (A x).

Files written (OUT_DIR/video/ and OUT_DIR/image/):
  checkpoint/                 the model's checkpoint, saved before any LoRA exactly as the other script saves it
                              (video: pipe.save_pretrained; image: transformer/, connectors/, vae/, scheduler/,
                              model_index.json)
  prompt_embeds.safetensors   the other script's prompt embeddings (the same file it writes)
  lora_{a,b}.{peft,comfyui,ltx}.safetensors   as above
  pipeline.safetensors        video, per run <run> in none / one / two: <run>.latents (output_type="latent":
                              de-normalised, unpacked [C, F', H', W'], what ltx2_pipeline_fixtures stores as
                              "latents"), <run>.frames [F, 3, H, W] in [0, 1] (output_type="pt"),
                              <run>.audio_latents [C, L, M], <run>.audio [2, samples]
  image.safetensors           image, per run: <run>.latents (denoised, packed [1, h*w, C]), <run>.image [3, H, W]
                              in [0, 1] (VaeImageProcessor.postprocess "pt", what ltx2_image_fixtures stores as
                              "image"), <run>.pixels [H, W, 3] uint8 = (image * 255).round() (numpy_to_pil's
                              rounding: the PNG ddo-host writes)
OUT_DIR/reference.json (written last): versions, seeds, per model the runs (LoRAs with strengths, steps, size,
frames, fps, seed, guidance) and the ddo-host flags of the run without its LoRA flags, the formats, the LoRAs (rank,
alpha, module counts, the ltx pre-multiplication, the peft metadata as written), the original-name mapping used, the
LoRA effect (max |delta| of frames / image between runs; one vs none and two vs one asserted > MIN_EFFECT), and
"checks", per model:
  peft / comfyui / ltx   whether diffusers' load_lora_weights accepts each file (else its error) and the peft scaling
                         it loads with at strength 1; every factor diffusers reads from an accepted file is asserted
                         to sit in the adapter's layer. For comfyui and ltx, the runs one, two and b (lora_b alone at
                         1.3, check only) from those files against the peft files' runs: compared or not (a refused
                         file), bitwise equal, max |delta| per tensor. diffusers 0.42.1 refuses the comfyui lora_a: its
                         LTX-2 loader requires "lora" in every key, and the .alpha keys lack it
  merged                 the peft runs against the factors merged by hand into the base weights (W += strength *
                         lora_alpha / r * B @ A, fp32; no peft): max |delta| per tensor, latents asserted
                         < MERGED_TOLERANCE (the semantics checked without diffusers' and peft's code)
Two messages are silenced: diffusers' "missing keys" warning when adapter "b" loads next to "a" (spurious: its filter
`adapter_name in key` finds the "b" of "transformer_blocks"; the factor check above stands in for it) and peft's
"Already found a `peft_config`" when a second adapter is injected (intended here).
"""

import argparse
import json
import logging
import sys
import warnings
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model_state_dict
from safetensors import safe_open
from safetensors.torch import save_file

import diffusers
import peft
from diffusers import FlowMatchEulerDiscreteScheduler, LTX2Pipeline
from diffusers.loaders import PeftAdapterMixin
from diffusers.loaders.lora_conversion_utils import _convert_non_diffusers_ltx2_lora_to_diffusers
from diffusers.loaders.lora_pipeline import LTX2LoraLoaderMixin
from diffusers.utils import logging as dlogging

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ltx2_image_fixtures as lif  # noqa: E402
import ltx2_pipeline_fixtures as lp  # noqa: E402
import ltx2_single_file_fixtures as lsf  # noqa: E402

LORA_SEED = 27
A_GAIN, B_GAIN = 1.0, 0.5
MIN_EFFECT = 0.05  # max |delta| of frames / image in [0, 1], one vs none
MERGED_TOLERANCE = 1e-4  # max |delta| of the latents, merged weights vs peft's runtime LoRA
BLOCK_A = ("attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0", "attn2.to_q", "attn2.to_k", "attn2.to_v",
           "attn2.to_out.0", "ff.net.0.proj", "ff.net.2")
LORAS = {
    "a": dict(rank=4, alpha=8, blocks=BLOCK_A, top=("proj_in",)),
    "b": dict(rank=2, alpha=None, blocks=("attn1.to_q", "attn1.to_v"), top=()),
}
RUNS = {"none": [], "one": [("a", 0.7)], "two": [("a", 0.7), ("b", 1.3)]}
# Check-only run (not stored): lora_b alone, the run a ComfyUI lora_b can be compared on when lora_a's is refused.
CHECK_RUNS = dict(RUNS, b=[("b", 1.3)])
FORMATS = {
    "peft": "diffusers' writer (LTX2Pipeline.save_lora_weights): transformer.<module>.lora_A.weight / .lora_B.weight, "
            "LoraConfig JSON (keys prefixed 'transformer.') in the safetensors metadata 'lora_adapter_metadata'; "
            "scale strength * lora_alpha / r",
    "comfyui": "diffusion_model.<diffusers module>.lora_A.weight / .lora_B.weight (+ diffusion_model.<module>.alpha, "
               "0-d fp32, when the LoRA has an alpha); ComfyUI's scale strength * alpha / rank (1 without alpha)",
    "ltx": "Lightricks' official: diffusion_model.<original LTX-2 module>.lora_A.weight / .lora_B.weight, no alpha "
           "(scale strength); B pre-multiplied by alpha / rank so that the effect equals the peft file's",
}
VIDEO_ARGS = ("--plugin ltx2 --model video/checkpoint --prompt-embeds video/prompt_embeds.safetensors --seed 0 "
              "--width 32 --height 32 --frames 5 --fps 25 --steps 2 --cfg-scale 1 --set plugin.ltx2_video.stg_scale=0 "
              "--set plugin.ltx2_video.modality_scale=1 --set plugin.ltx2_video.guidance_rescale=0 "
              "--set plugin.ltx2_video.audio_guidance_scale=1 --set plugin.ltx2_video.audio_stg_scale=0 "
              "--set plugin.ltx2_video.audio_modality_scale=1 --set plugin.ltx2_video.audio_guidance_rescale=0 "
              "--set plugin.ltx2_video.use_cross_timestep=false --set plugin.ltx2_video.max_sequence_length=16")
IMAGE_ARGS = ("--plugin ltx2_image --model image/checkpoint --prompt-embeds image/prompt_embeds.safetensors --seed 43 "
              "--width 24 --height 32 --steps 4 --cfg-scale 3 --set plugin.ltx2_image.guidance_rescale=0.7 "
              "--set plugin.ltx2_image.pag_scale=0.2 --set 'plugin.ltx2_image.pag_applied_layers=[1]'")


class LoraImageTransformer(lif.LTX2ImageTransformer2DModel, PeftAdapterMixin):
    """ltx2_image_fixtures' composed transformer with diffusers' PeftAdapterMixin (load_lora_adapter, set_adapters)."""


class ImageLoraHost(LTX2LoraLoaderMixin):
    """What LTX2LoraLoaderMixin needs of a pipeline to load into the composed image transformer: the same
    load_lora_weights (lora_state_dict, its converter and checks, load_lora_into_transformer) and set_adapters."""

    hf_device_map = None

    def __init__(self, transformer):
        self.transformer = transformer
        self.connectors = None

    @property
    def components(self):
        return {"transformer": self.transformer}


def lora_image_transformer(tr):
    t = LoraImageTransformer.from_config(tr.config)
    t.load_state_dict(tr.state_dict(), strict=True)
    return t.eval()


def targets(model, spec):
    """Full module paths of a LoRA on `model`: the block modules in every block (and their audio_ counterparts where
    the model has audio_proj_in), then the top-level ones."""
    linears = {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    audio = "audio_proj_in" in linears
    block = list(spec["blocks"]) + ([f"audio_{m}" for m in spec["blocks"]] if audio and spec["top"] else [])
    top = list(spec["top"]) + ([f"audio_{m}" for m in spec["top"]] if audio else [])
    names = [f"transformer_blocks.{i}.{m}" for i in range(len(model.transformer_blocks)) for m in block] + top
    missing = [n for n in names if n not in linears]
    assert not missing, missing
    return names


def make_lora(model, name, index):
    """The LoRA `name` made with peft on `model` (a fresh copy): its LoraConfig and peft state dict (fp32)."""
    spec = LORAS[name]
    names = targets(model, spec)
    config = LoraConfig(r=spec["rank"], lora_alpha=spec["alpha"] or spec["rank"], target_modules=list(names),
                        lora_dropout=0.0, init_lora_weights=True)
    model.add_adapter(config, adapter_name=name)
    g = torch.Generator().manual_seed(LORA_SEED + index)
    modules = dict(model.named_modules())
    with torch.no_grad():
        for m in sorted(names):
            layer = modules[m]
            a, b = layer.lora_A[name].weight, layer.lora_B[name].weight
            a.copy_(torch.randn(a.shape, generator=g) * A_GAIN / a.shape[1] ** 0.5)
            b.copy_(torch.randn(b.shape, generator=g) * B_GAIN / b.shape[1] ** 0.5)
    state = {k: v.detach().float().contiguous().clone() for k, v in get_peft_model_state_dict(model, adapter_name=name).items()}
    assert sorted(state) == sorted(f"{m}.lora_{x}.weight" for m in names for x in "AB"), sorted(state)[:4]
    return config, state


def write_loras(out, model_factory):
    """lora_{a,b}.{peft,comfyui,ltx}.safetensors in `out`; returns the LoRAs' description for reference.json."""
    desc = {}
    for index, name in enumerate(LORAS):
        spec = LORAS[name]
        config, state = make_lora(model_factory(), name, index)
        modules = sorted(k.rsplit(".lora_", 1)[0] for k in state if ".lora_A." in k)
        metadata = config.to_dict()
        for k, v in metadata.items():  # sets (target_modules) in a stable order, so the header is reproducible
            if isinstance(v, set):
                metadata[k] = sorted(v)
        LTX2Pipeline.save_lora_weights(out, transformer_lora_layers=state, weight_name=f"lora_{name}.peft.safetensors",
                                       transformer_lora_adapter_metadata=metadata)
        comfy = {f"diffusion_model.{k}": v for k, v in state.items()}
        if spec["alpha"] is not None:
            comfy.update({f"diffusion_model.{m}.alpha": torch.tensor(float(spec["alpha"])) for m in modules})
        save_file(comfy, out / f"lora_{name}.comfyui.safetensors")
        premultiply = (spec["alpha"] or spec["rank"]) / spec["rank"]
        ltx = {}
        for k, v in state.items():
            module, suffix = k.rsplit(".lora_", 1)
            ltx[f"diffusion_model.{lsf.to_original(module)}.lora_{suffix}"] = (
                v * premultiply if suffix.startswith("B") else v).contiguous()
        save_file(ltx, out / f"lora_{name}.ltx.safetensors")
        # diffusers' converter reads the original names back into exactly the peft keys.
        back = _convert_non_diffusers_ltx2_lora_to_diffusers(ltx)
        assert sorted(back) == sorted(f"transformer.{k}" for k in state), sorted(set(back) ^ {f"transformer.{k}" for k in state})
        with safe_open(str(out / f"lora_{name}.peft.safetensors"), "pt") as f:
            meta = json.loads(f.metadata()["lora_adapter_metadata"])
        assert meta["transformer.r"] == spec["rank"] and meta["transformer.lora_alpha"] == (spec["alpha"] or spec["rank"])
        desc[f"lora_{name}"] = {
            "rank": spec["rank"], "alpha": spec["alpha"], "peft_lora_alpha": spec["alpha"] or spec["rank"],
            "scale": (spec["alpha"] or spec["rank"]) / spec["rank"], "modules": len(modules),
            "tensors": {"peft": len(state), "comfyui": len(comfy), "ltx": len(ltx)},
            "block_modules": list(dict.fromkeys(m.split(".", 2)[2] for m in modules if m.startswith("transformer_blocks."))),
            "top_modules": [m for m in modules if not m.startswith("transformer_blocks.")],
            "ltx_b_premultiplied_by": premultiply, "seed": LORA_SEED + index, "a_gain": A_GAIN, "b_gain": B_GAIN,
            "peft_metadata": meta,
            "renamed_in_ltx": {m: lsf.to_original(m) for m in modules if lsf.to_original(m) != m}}
    return desc


class SpuriousMissingKeys(logging.Filter):
    """Drops diffusers' "Loading adapter weights from state_dict led to missing keys" warning. Loading adapter "b"
    next to "a" lists all of "a"'s block keys because its filter `adapter_name in key` finds the "b" of
    "transformer_blocks"; apply() checks instead that every factor of every file is loaded."""

    def filter(self, record):
        return not record.getMessage().startswith("Loading adapter weights from state_dict led to missing keys")


dlogging.get_logger("diffusers.utils.peft_utils").addFilter(SpuriousMissingKeys())
warnings.filterwarnings("ignore", message="Already found a `peft_config` attribute in the model")


def apply(host, out, fmt, loras):
    """load_lora_weights for each (name, strength) of `loras` from the `fmt` files, then set_adapters. Checks that
    every factor diffusers reads from the file (lora_state_dict: its converter) sits in the adapter's layer; returns
    the adapters' peft scaling (lora_alpha / r) as loaded."""
    scaling = {}
    for name, _ in loras:
        weight_name = f"lora_{name}.{fmt}.safetensors"
        host.load_lora_weights(str(out), weight_name=weight_name, adapter_name=name)
        modules = dict(host.transformer.named_modules())
        state = host.lora_state_dict(str(out), weight_name=weight_name)
        for key, value in state.items():
            module, factor = key.removeprefix("transformer.").rsplit(".lora_", 1)
            loaded = getattr(modules[module], f"lora_{factor[0]}")[name].weight
            assert torch.equal(loaded, value), (fmt, name, key)
        scaling[name] = sorted({m.scaling[name] for m in modules.values() if name in getattr(m, "scaling", {})})
    if loras:
        host.set_adapters([n for n, _ in loras], [s for _, s in loras])
    return scaling


def merge(transformer, out, loras):
    """The independent check of peft's runtime LoRA: W += strength * lora_alpha / r * B @ A (fp32) for each
    (name, strength) of `loras`, from the peft files' factors and metadata, into the plain transformer."""
    modules = dict(transformer.named_modules())
    with torch.no_grad():
        for name, strength in loras:
            path = out / f"lora_{name}.peft.safetensors"
            with safe_open(str(path), "pt") as f:
                meta = json.loads(f.metadata()["lora_adapter_metadata"])
                scale = strength * meta["transformer.lora_alpha"] / meta["transformer.r"]
                for key in f.keys():
                    if ".lora_A." in key:
                        module = key.removeprefix("transformer.").split(".lora_A.")[0]
                        b = f.get_tensor(key.replace(".lora_A.", ".lora_B."))
                        modules[module].weight += scale * (b @ f.get_tensor(key))
    return {}


# ------------------------------------------------------------------------------------------------------------- video
def video_run(out, embeds, fmt, loras, load_only=False):
    pipe = lp.pipeline(False)
    scaling = merge(pipe.transformer, out, loras) if fmt == "merged" else apply(pipe, out, fmt, loras)
    if load_only:
        return scaling
    return lp.run(pipe, embeds, lp.PLAIN, False)


# ------------------------------------------------------------------------------------------------------------- image
IMAGE_CASE = "base_pag"


def image_run(out, embeds, fmt, loras, load_only=False):
    tr, conn, vae, _ = lif.components()
    host = ImageLoraHost(lora_image_transformer(tr))
    scaling = merge(host.transformer, out, loras) if fmt == "merged" else apply(host, out, fmt, loras)
    if load_only:
        return scaling
    with torch.no_grad():
        latents, image = lif.compose_image(host.transformer, conn, vae,
                                           FlowMatchEulerDiscreteScheduler(**lif.LTX2_SCHEDULER), embeds,
                                           lif.CASES[IMAGE_CASE], lif.SEED)
    pixels = (image.permute(1, 2, 0) * 255).round().to(torch.uint8)
    return {"latents": latents, "image": image, "pixels": pixels}


def write_image_checkpoint(ck):
    """checkpoint/ as ltx2_image_fixtures.main writes it."""
    tr, conn, vae, sched = lif.components()
    tr.save_pretrained(ck / "transformer")
    conn.save_pretrained(ck / "connectors")
    vae.save_pretrained(ck / "vae")
    sched.save_pretrained(ck / "scheduler")
    (ck / "model_index.json").write_text(lif.model_index(False))


# ------------------------------------------------------------------------------------------------------------ common
def max_diff(x, y, key):
    return (x[key].double() - y[key].double()).abs().max().item()


def checks(out, run_fn, embeds, reference):
    """Every file through diffusers' load_lora_weights: accepted or not (and the peft scaling it loads with at strength
    1); the runs from the comfyui and ltx files against the peft files' (CHECK_RUNS: one, two, and b = lora_b alone)."""
    result = {}
    for fmt in ("peft", "comfyui", "ltx"):
        files = {}
        for name in LORAS:
            try:
                scaling = run_fn(out, embeds, fmt, [(name, 1.0)], load_only=True)
                files[f"lora_{name}"] = {"accepted": True, "peft_scaling": scaling[name]}
            except Exception as e:  # noqa: BLE001 -- recorded: what diffusers says about the file
                files[f"lora_{name}"] = {"accepted": False, "error": f"{type(e).__name__}: {e}"}
        runs = {}
        for run, loras in CHECK_RUNS.items():
            if not loras or fmt == "peft":
                continue
            refused = [f"lora_{n}" for n, _ in loras if not files[f"lora_{n}"]["accepted"]]
            if refused:
                runs[run] = {"compared": False, "refused": refused}
                continue
            got = run_fn(out, embeds, fmt, loras)
            want = reference[run]
            diffs = {k: max_diff(got, want, k) for k in want}
            runs[run] = {"compared": True, "loras": [[f"lora_{n}", s] for n, s in loras],
                         "equal": all(torch.equal(got[k], want[k]) for k in want), "max_abs_diff": diffs}
        result[fmt] = {"files": files, "runs": runs}
    merged = {}
    for run, loras in CHECK_RUNS.items():
        if loras:
            got = run_fn(out, embeds, "merged", loras)
            merged[run] = {k: max_diff(got, reference[run], k) for k in reference[run]}
            assert merged[run]["latents"] < MERGED_TOLERANCE, (run, merged[run])
    result["merged"] = {"what": "the peft files' factors merged by hand into the base weights (W += strength * "
                                "lora_alpha / r * B @ A, fp32) against the peft runs: max abs difference",
                        "runs": merged}
    return result


def write_model(out, kind, embeds, run_fn, model_factory, visible, tensor_file, settings):
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in embeds.items()}, out / "prompt_embeds.safetensors")
    loras = write_loras(out, model_factory)
    outputs = {run: run_fn(out, embeds, "peft", loras_) for run, loras_ in CHECK_RUNS.items()}
    tensors = {f"{run}.{k}": v.contiguous() for run in RUNS for k, v in outputs[run].items()}
    save_file(tensors, out / tensor_file)
    effect = {"one_vs_none": max_diff(outputs["one"], outputs["none"], visible),
              "two_vs_one": max_diff(outputs["two"], outputs["one"], visible),
              "b_vs_none": max_diff(outputs["b"], outputs["none"], visible), "key": visible}
    assert effect["one_vs_none"] > MIN_EFFECT, (kind, effect)
    assert effect["two_vs_one"] > MIN_EFFECT, (kind, effect)
    return {"settings": settings, "file": tensor_file,
            "runs": {run: {"loras": [[f"lora_{n}", s] for n, s in l], "format": "peft"} for run, l in RUNS.items()},
            "shapes": {k: list(v.shape) for k, v in tensors.items() if k.startswith("none.")},
            "loras": loras, "effect": effect, "checks": checks(out, run_fn, embeds, outputs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    out = Path(ap.parse_args().out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.use_deterministic_algorithms(True)

    video = out / "video"
    lp.pipeline(False).save_pretrained(video / "checkpoint")
    p = lp.PLAIN
    video_ref = write_model(
        video, "video", lp.prompt_embeds(), video_run, lambda: lp.transformer(False), "frames", "pipeline.safetensors",
        dict(built_as="ltx2_pipeline_fixtures.pipeline(v23=False) (its checkpoint_20/, case 'plain')",
             pipeline="diffusers LTX2Pipeline", steps=p["num_inference_steps"], width=p["width"], height=p["height"],
             frames=p["num_frames"], fps=p["frame_rate"], seed=lp.SEED, guidance_scale=p["guidance_scale"],
             negative=False, call=p, ddo_host_args=VIDEO_ARGS))

    image = out / "image"
    write_image_checkpoint(image / "checkpoint")
    s = lif.CASES[IMAGE_CASE]
    image_ref = write_model(
        image, "image", lif.prompt_embeds(), image_run, lambda: lora_image_transformer(lif.components()[0]), "image",
        "image.safetensors",
        dict(built_as=f"ltx2_image_fixtures.components() (its checkpoint/, case '{IMAGE_CASE}')",
             pipeline="ltx2_image_fixtures.compose_image (composed diffusers LTX-2 modules)", steps=s["steps"],
             width=lif.WIDTH, height=lif.HEIGHT, frames=1, seed=lif.SEED, guidance_scale=s["guidance_scale"],
             guidance_rescale=s["guidance_rescale"], pag_scale=s["pag_scale"], pag_blocks=s["pag_blocks"],
             case=IMAGE_CASE, call=s, ddo_host_args=IMAGE_ARGS))

    ref = {"reference": "diffusers + peft (load_lora_weights / set_adapters, unfused)",
           "reference_version": diffusers.__version__, "peft_version": peft.__version__,
           "torch_version": torch.__version__, "lora_seed": LORA_SEED, "min_effect": MIN_EFFECT,
           "strengths": {run: [[f"lora_{n}", s] for n, s in l] for run, l in RUNS.items()},
           "formats": FORMATS,
           "original_names": "ltx2_single_file_fixtures.to_original (diffusers' convert_ltx2_transformer_to_diffusers "
                             "inverted); checked: _convert_non_diffusers_ltx2_lora_to_diffusers gives back the peft keys",
           "ddo_host_args_note": "paths relative to the fixture directory; the LoRA flags are not included",
           "models": {"video": video_ref, "image": image_ref}}
    (out / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")


if __name__ == "__main__":
    main()
