#!/usr/bin/env bash
# tools/ddo bench full_scale -> tools/bench/run_full_scale.sh BUILD_DIR [options of full_scale.py]
# The product's claim at full size (issue 42): the real Qwen-Image 2.1 transformer (every block at its true width and
# count, random bf16 weights written once into a cache outside the clone) runs one step on the disk route on a machine
# whose RAM its compute-dtype weights do not fit; prints the forecast host peak beside the measured RSS, the bytes read
# and the step time, and writes BUILD_DIR/bench/full_scale.json.
set -euo pipefail
BUILD="${1:?usage: $(basename "$0") BUILD_DIR [options]}"; shift || true
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${DDO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ddo/venv}"
cmake --build "$BUILD" --target ddo-host qwen_image_21 linear ddo_manifest_main >/dev/null
exec "$VENV/bin/python" "$ROOT/tools/bench/full_scale.py" "$BUILD" "$@"
