#!/usr/bin/env bash
# tools/ddo bench qwen_image_21_quant -> tools/bench/run_qwen_image_21_quant.sh BUILD_DIR [options of qwen_image_21_quant.py]
# Quantized transformers (GGUF Q8_0 / Q4_K, scaled fp8, SDNQ int8 / uint4) against the bf16 one on the same random real-width
# Qwen-Image 2.1 checkpoint, on the CPU; prints medians and ratios, writes BUILD_DIR/bench/qwen_image_21_quant.json.
set -euo pipefail
BUILD="${1:?usage: run_qwen_image_21_quant.sh BUILD_DIR [options]}"; shift || true
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${DDO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ddo/venv}"
cmake --build "$BUILD" --target ddo-host qwen_image_21 linear ddo_manifest_main >/dev/null  # the manifest too: ddo-host verifies the plugins against it
exec "$VENV/bin/python" "$ROOT/tools/bench/qwen_image_21_quant.py" "$BUILD" "$@"
