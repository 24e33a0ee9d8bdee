#!/usr/bin/env bash
# tools/ddo bench qwen_image_21_cpu -> tools/bench/run_qwen_image_21_cpu.sh BUILD_DIR [options of qwen_image_21_cpu.py]
# ddo (resident, dynamic, disk, group_block) against diffusers without offload on the same random real-width
# Qwen-Image 2.1 checkpoint, on the CPU; prints medians and ratios, writes BUILD_DIR/bench/qwen_image_21_cpu.json.
# run_qwen_image_21_quant.sh is a link to this file and runs qwen_image_21_quant.py (quantized transformers against
# bf16): the script is named after the name this file was called by.
set -euo pipefail
BUILD="${1:?usage: $(basename "$0") BUILD_DIR [options]}"; shift || true
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${DDO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ddo/venv}"
SCRIPT="$(basename "$0" .sh)"; SCRIPT="${SCRIPT#run_}.py"
cmake --build "$BUILD" --target ddo-host qwen_image_21 linear ddo_manifest_main >/dev/null  # the manifest too: ddo-host verifies the plugins against it
exec "$VENV/bin/python" "$ROOT/tools/bench/$SCRIPT" "$BUILD" "$@"
