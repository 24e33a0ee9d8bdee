#!/usr/bin/env bash
# tools/ddo demo ltx2: the LTX-2 video demo. Creates once (under the build tree) a small random LTX-2.3-style
# checkpoint saved whole (Gemma-3 text encoder + tokenizer, connectors, audio+video DiT, video VAE, audio VAE, BWE
# vocoder, scheduler; tools/demo/ltx2_demo_checkpoint.py), then runs, from a text prompt,
#   ddo-host --plugin ltx2 --preset low_ram_safe.toml -p "..." --width 32 --height 32 --frames 9 --fps 24
#            --set workload.sigmas=[the 8 distilled sigmas] --set plugin.ltx2_video.stg_blocks=[1]
# (LTX2Pipeline's default guidance: CFG 3 with the negative prompt "", STG on block 1, modality isolation 3, rescale
# 0.7; 3 transformer passes per step) with a progress line per step and phase (text encoder, denoise, video decode,
# audio decode), and prints where video.mp4 (H.264 + AAC) and audio.wav are, what the MP4 holds, and the one-screen
# summary of the report. The tiny transformer would fit low_ram_safe's resident set whole, so the demo caps it
# (--set components.transformer.resident_budget_gb): most blocks stream every pass, as the real model's do.
# Then the same run from a still (image-to-video, LTX2ImageToVideoPipeline: --image FILE on frame 0; the Qwen demo's
# image when tools/ddo demo ran before, else a small PNG drawn here), written to output/i2v/.
# The weights are random: the clip is noise with noise for sound. Usage: tools/demo/run_demo_ltx2.sh BUILD_DIR VENV
set -euo pipefail
BUILD="$(cd "${1:?usage: run_demo_ltx2.sh BUILD_DIR VENV}" && pwd)"
VENV="${2:?usage: run_demo_ltx2.sh BUILD_DIR VENV}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEMO="$BUILD/demo/ltx2"
HOST="$BUILD/bin/ddo-host"
LAYERS=4
RESIDENT_GB=0.00005  # ~54 KB: one of the 4 tiny blocks resident, the others streamed
SIGMAS='[1.0,0.99375,0.9875,0.98125,0.975,0.909375,0.725,0.421875]'  # LTX-2's distilled schedule
PROMPT="a lighthouse at dusk, waves crashing on the rocks"

say() { printf '\033[1mddo demo:\033[0m %s\n' "$*"; }
[ -x "$HOST" ] || { echo "ddo demo: $HOST is missing; run tools/ddo build" >&2; exit 1; }

if ! grep -q "\"num_layers\": $LAYERS" "$DEMO/checkpoint/demo.json" 2>/dev/null; then
  say "creating a small random LTX-2.3-style checkpoint ($LAYERS blocks, Gemma-3 text encoder) with diffusers + transformers (once) in $DEMO/checkpoint"
  rm -rf "$DEMO/checkpoint"
  "$VENV/bin/python" "$ROOT/tools/demo/ltx2_demo_checkpoint.py" "$DEMO/checkpoint" --num-layers "$LAYERS" >/dev/null 2>&1
fi

OUT="$DEMO/output"
mkdir -p "$OUT"
ARGS=(--plugin ltx2 --preset low_ram_safe.toml --model "$DEMO/checkpoint" -p "$PROMPT" --width 32 --height 32
      --frames 9 --fps 24 --set "workload.sigmas=$SIGMAS" --set "plugin.ltx2_video.stg_blocks=[1]"
      --set "components.transformer.resident_budget_gb=$RESIDENT_GB" --output "$OUT" --report "$OUT/ddo_report.json"
      --overwrite)
say "ddo-host ${ARGS[*]}"
set +e
"$HOST" "${ARGS[@]}"
rc=$?
set -e
echo
if [ "$rc" -ne 0 ]; then
  say "ddo-host exited with $rc; the report (status failed) is $OUT/ddo_report.json"
  exit "$rc"
fi
say "video:  $OUT/video.mp4"
say "audio:  $OUT/audio.wav"
say "report: $OUT/ddo_report.json"
"$HOST" report summarize "$OUT/ddo_report.json"

# Image-to-video: the condition frame is the Qwen demo's image when there is one, else a drawn gradient.
STILL="$BUILD/demo/qwen_image_21/output/image.png"
if [ ! -f "$STILL" ]; then
  STILL="$DEMO/still.png"
  "$VENV/bin/python" - "$STILL" <<'PY'
import sys
import numpy as np
from PIL import Image
y, x = np.mgrid[0:48, 0:64].astype(np.float32)
rgb = np.stack([128 + 100 * np.sin(x / 6), 128 + 100 * np.cos(y / 5), 255 * x / 64], axis=-1)
Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).save(sys.argv[1])
PY
fi
I2V="$OUT/i2v"
mkdir -p "$I2V"
I2V_ARGS=("${ARGS[@]}")
for i in "${!I2V_ARGS[@]}"; do
  case "${I2V_ARGS[$i]}" in
    --output) I2V_ARGS[$((i + 1))]="$I2V" ;;
    --report) I2V_ARGS[$((i + 1))]="$I2V/ddo_report.json" ;;
  esac
done
I2V_ARGS+=(--image "$STILL")
echo
say "image-to-video from $STILL: ddo-host ${I2V_ARGS[*]}"
set +e
"$HOST" "${I2V_ARGS[@]}"
rc=$?
set -e
echo
if [ "$rc" -ne 0 ]; then
  say "ddo-host (image-to-video) exited with $rc; the report (status failed) is $I2V/ddo_report.json"
  exit "$rc"
fi
say "video:  $I2V/video.mp4 (frame 0 conditioned on $STILL)"
say "report: $I2V/ddo_report.json"
"$HOST" report summarize "$I2V/ddo_report.json"
