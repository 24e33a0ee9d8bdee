#!/usr/bin/env bash
# tools/ddo bench engine -> tools/bench/run_engine.sh BUILD_DIR [--quick]
# Runs the engine bench (synthetic workload, CPU transport) and writes BUILD_DIR/bench/engine.json.
set -euo pipefail
BUILD="${1:?usage: run_engine.sh BUILD_DIR [--quick]}"; shift || true
cmake --build "$BUILD" --target ddo_bench_engine linear >/dev/null
exec "$BUILD/bin/ddo_bench_engine" "$BUILD" "$@"
