#!/usr/bin/env bash
# tools/ddo demo: the embedded default. Creates once (under the build tree) a small random Qwen-Image 2.1
# checkpoint saved whole (Qwen3-VL text encoder + tokenizer, transformer, VAE, scheduler) with the reference
# harness, then runs, from a text prompt,
#   ddo-host --plugin qwen_image --preset low_ram_safe.toml -p "..." -n "..." --cfg-scale 4 --steps 4 --width 256 --height 256
# with a progress bar per phase (the text encoder's layers stream on low_ram_safe's group_leaf route and leave
# memory before denoising), and prints where the PNG and the report are plus a one-screen summary of the report. The tiny transformer (6 blocks of ~40 KB) would fit low_ram_safe's 3 GiB
# resident set whole and stream nothing, so the demo caps the transformer's resident set at ~100 KB
# (--set components.transformer.resident_budget_gb): 2 blocks stay resident and the other 4 are streamed
# through 2 slots every step, as most blocks of the real model are under this preset.
# Usage: tools/demo/run_demo.sh BUILD_DIR VENV
set -euo pipefail
BUILD="$(cd "${1:?usage: run_demo.sh BUILD_DIR VENV}" && pwd)"
VENV="${2:?usage: run_demo.sh BUILD_DIR VENV}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEMO="$BUILD/demo/qwen_image_21"
HOST="$BUILD/bin/ddo-host"
STEPS=4
LAYERS=6
RESIDENT_GB=0.0001  # ~107 KB: 2 of the 6 tiny blocks resident, 4 streamed

say() { printf '\033[1mddo demo:\033[0m %s\n' "$*"; }
[ -x "$HOST" ] || { echo "ddo demo: $HOST is missing; run tools/ddo build" >&2; exit 1; }

# (Re)create when missing or made with another block count.
PROMPT="a lighthouse at dusk, watercolor"
NEGATIVE="blurry, low quality"
if ! grep -q "\"num_layers\": $LAYERS," "$DEMO/inputs/checkpoint.json" 2>/dev/null; then
  say "creating a small qwen_image_21 checkpoint ($LAYERS blocks, Qwen3-VL text encoder, tokenizer) with transformers + diffusers (once) in $DEMO/inputs"
  rm -rf "$DEMO/inputs"
  "$VENV/bin/python" "$ROOT/tools/reference/qwen_image_21_text_fixtures.py" --checkpoint-only --num-layers "$LAYERS" \
    "$DEMO/inputs" >/dev/null 2>&1
fi

OUT="$DEMO/output"
mkdir -p "$OUT"
say "ddo-host --plugin qwen_image --preset low_ram_safe.toml -p \"$PROMPT\" -n \"$NEGATIVE\" --cfg-scale 4 --set components.transformer.resident_budget_gb=$RESIDENT_GB --steps $STEPS --width 256 --height 256 --overwrite"
# ddo-host draws the plan, a progress bar per phase (on a terminal; plain lines otherwise) and the summary itself.
set +e
"$HOST" --plugin qwen_image --preset low_ram_safe.toml --set "components.transformer.resident_budget_gb=$RESIDENT_GB" \
  --model "$DEMO/inputs/checkpoint" -p "$PROMPT" -n "$NEGATIVE" --cfg-scale 4 \
  --steps "$STEPS" --width 256 --height 256 --output "$OUT" --report "$OUT/ddo_report.json" --overwrite
rc=$?
set -e
echo
if [ "$rc" -ne 0 ]; then
  say "ddo-host exited with $rc; the report (status failed) is $OUT/ddo_report.json"
  exit "$rc"
fi
say "image:  $OUT/image.png"
say "report: $OUT/ddo_report.json"
"$HOST" report summarize "$OUT/ddo_report.json"
