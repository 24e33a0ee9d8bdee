#!/usr/bin/env bash
# tools/ddo bench ltx2_video_cache -> tools/bench/run_ltx2_video_cache.sh BUILD_DIR [options of ltx2_video_cache.py]
# Step caching on the LTX-2 transformer (issue 41): every --cache kind against no cache, real-width LTX-2.3 blocks with
# random weights, on the resident and disk routes; prints medians and ratios, writes BUILD_DIR/bench/ltx2_video_cache.json.
# run_qwen_image_21_cpu.sh is the Qwen benches' runner; this one builds the ltx2_video plugin instead of qwen_image_21.
set -euo pipefail
BUILD="${1:?usage: $(basename "$0") BUILD_DIR [options]}"; shift || true
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${DDO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ddo/venv}"
cmake --build "$BUILD" --target ddo-host ltx2_video linear ddo_manifest_main >/dev/null  # the manifest too: ddo-host verifies the plugins against it
exec "$VENV/bin/python" "$ROOT/tools/bench/ltx2_video_cache.py" "$BUILD" "$@"
