#!/usr/bin/env bash
# tools/ddo bench model -> tools/bench/run_model.sh BUILD_DIR [options of model_bench.py]
# ddo's presets against diffusers (no offload, group offload block/leaf) and the original Python DDO on one random
# real-shape checkpoint; prints the table, writes BUILD_DIR/bench/<name>.json and .md (docs/benchmarks.md).
# The controls run in a bench virtualenv: the cached venv's packages plus tools/reference/requirements-bench.txt
# (DDO 0.1.0rc2), set up here once; when it cannot be installed (no registry) the DDO rows
# say so and the rest still runs.
set -euo pipefail
BUILD="${1:?usage: run_model.sh BUILD_DIR [options]}"; shift || true
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${DDO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ddo/venv}"
BENCH_VENV="${DDO_BENCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ddo/bench-venv}"
REQ="$ROOT/tools/reference/requirements-bench.txt"

setup_bench_venv() {
  local stamp="$BENCH_VENV/.ddo-requirements-bench"
  [ -x "$BENCH_VENV/bin/python" ] && [ -f "$stamp" ] && cmp -s "$REQ" "$stamp" && return 0
  if [ ! -x "$BENCH_VENV/bin/python" ]; then
    "$VENV/bin/python" -m venv --without-pip "$BENCH_VENV" 2>/dev/null || "$VENV/bin/python" -m venv "$BENCH_VENV"
  fi
  # Layer it on the cached venv: its site-packages come after the bench venv's own.
  local own parent
  own="$("$BENCH_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  parent="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$parent" > "$own/zz_ddo_venv.pth"
  if "$VENV/bin/pip" --python "$BENCH_VENV/bin/python" install -q --disable-pip-version-check --no-deps -r "$REQ" \
       2>/tmp/ddo-bench-venv.log; then
    cp "$REQ" "$stamp"
  else
    echo "ddo: bench: could not install $REQ into $BENCH_VENV ($(tail -1 /tmp/ddo-bench-venv.log)); the DDO 0.1.0rc2 rows will say so" >&2
  fi
}

if [ -z "${DDO_BENCH_NO_VENV:-}" ]; then setup_bench_venv; PY="$BENCH_VENV/bin/python"; else PY="$VENV/bin/python"; fi
cmake --build "$BUILD" --target ddo-host qwen_image_21 linear ddo_manifest_main >/dev/null  # the manifest too: ddo-host verifies the plugins against it
exec "$PY" "$ROOT/tools/bench/model_bench.py" "$BUILD" --python "$PY" "$@"
