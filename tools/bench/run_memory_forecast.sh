#!/usr/bin/env bash
# tools/ddo bench memory_forecast -> tools/bench/run_memory_forecast.sh BUILD_DIR [options of memory_forecast.py]
# The memory forecast against the measured peaks (issue 42): the parity fixtures and the real-width bench checkpoints
# of qwen_image_21 and ltx2_video; prints forecast, measured and ratio per phase, writes BUILD_DIR/bench/memory_forecast.json.
set -euo pipefail
BUILD="${1:?usage: $(basename "$0") BUILD_DIR [options]}"; shift || true
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${DDO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ddo/venv}"
cmake --build "$BUILD" --target ddo-host qwen_image_21 ltx2_video ltx2_image linear ddo_manifest_main qwen_image_21_fixtures \
  ltx2_pipeline_fixtures ltx2_image_fixtures qwen_image_21_quant_fixtures qwen_image_21_cache_fixtures \
  qwen_image_21_text_fixtures >/dev/null
exec "$VENV/bin/python" "$ROOT/tools/bench/memory_forecast.py" "$BUILD" "$@"
