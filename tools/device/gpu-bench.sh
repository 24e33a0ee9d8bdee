#!/usr/bin/env bash
# tools/device/gpu-bench.sh OUT_DIR
# The one script for the GPU machine (issue 13; no network, none of our Debian packages, 15 minutes of device
# time per task including start-up). In order, each step under its own time limit:
#   1. tools/device/gpu-checks.sh: builds ddo from the carry (shared-deps/) into build-gpu, runs `ctest -L cuda`
#      and the CUDA probe;
#   2. installs the bench wheels carried in shared-deps/wheels (diffusers, the original Python DDO 0.1.0rc2;
#      tools/device/prepare-carry.sh puts them there) into a private site dir;
#   3. the model bench (tools/bench/model_bench.py) for qwen_image_21 on CUDA: 1024x1024, bf16, a random checkpoint
#      at the real block width with DEPTH blocks, under an 8 GB device budget that forces streaming (ddo presets,
#      diffusers group offload block/leaf with streams, DDO 0.1.0rc2), then a resident run (ddo off vs diffusers),
#      then the quantized rows (issue 26): QUANT_DEPTH blocks, bf16 beside GGUF Q8_0 and scaled fp8 (written here
#      by gguf-py and torch; Q4_K on request: its quantizer is numpy, ~70 s for 4 blocks), ddo off and low_ram_safe
#      under the same budget;
#   3b. the demo's command and two parity fixtures (carried: build/fixtures/...) on CUDA, for their forecasts;
#   4. the memory forecast of every ddo run beside its measured peaks (tools/bench/forecast_summary.py, issue 42);
#   5. OUT_DIR gets at most 8 files (the device tool returns no more): summary.txt, streaming.md, streaming.json,
#      resident.md, resident.json, quant.md, quant.json, logs.tar.gz (every log, the gpu-checks outputs, the ddo
#      reports).
# Exit 0 when the checks passed and the three benches wrote their tables.
#
# Environment:
#   DDO_GPU_BENCH_DRY_RUN=1  the CPU rehearsal: gpu-checks in its dry mode (cuda tests must skip) and the bench in
#                            --dry-run (every CUDA part listed as skipped, with its reason); needs no GPU
#   DDO_GPU_BENCH_PYTHON     the interpreter for the bench (default python3)
#   DDO_GPU_BENCH_DEPTH      transformer blocks (default 20: 8.7 GB bf16, more than the 8 GB budget)
#   DDO_GPU_BENCH_SIZE       WxH (default 1024x1024);  DDO_GPU_BENCH_STEPS (default 4)
#   DDO_GPU_BENCH_ROUNDS     rounds per variant (default 1: one run each, no warm-up round; 2 excludes a warm-up)
#   DDO_GPU_BENCH_BUDGET_GB  device budget of the streaming and quant benches (default 8)
#   DDO_GPU_BENCH_QUANT      the quant bench's formats (default q8_0,fp8; also q4_k; empty: no quant bench)
#   DDO_GPU_BENCH_QUANT_DEPTH  its transformer blocks (default 4: the writers quantize on the CPU)
#   DDO_GPU_BENCH_SKIP_CHECKS=1  reuse an existing build-gpu instead of running gpu-checks.sh
#   DDO_GPU_BENCH_FIXTURES  where the carried parity fixtures are (default build/fixtures)
#   DDO_CARRY, DDO_BUILD_DIR as for gpu-checks.sh
# See docs/validation.md, "Device checks" and docs/benchmarks.md.
set -uo pipefail

OUT="${1:?usage: tools/device/gpu-bench.sh OUT_DIR}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CARRY="${DDO_CARRY:-$ROOT/shared-deps}"
DRY="${DDO_GPU_BENCH_DRY_RUN:-0}"
if [ "$DRY" = 1 ]; then BUILD="${DDO_BUILD_DIR:-$ROOT/build-dry}"; else BUILD="${DDO_BUILD_DIR:-$ROOT/build-gpu}"; fi
PY="${DDO_GPU_BENCH_PYTHON:-python3}"
DEPTH="${DDO_GPU_BENCH_DEPTH:-20}"
SIZE="${DDO_GPU_BENCH_SIZE:-1024x1024}"
STEPS="${DDO_GPU_BENCH_STEPS:-4}"
ROUNDS="${DDO_GPU_BENCH_ROUNDS:-1}"
BUDGET="${DDO_GPU_BENCH_BUDGET_GB:-8}"
QUANT="${DDO_GPU_BENCH_QUANT-q8_0,fp8}"
QUANT_DEPTH="${DDO_GPU_BENCH_QUANT_DEPTH:-4}"
WORK="$(mktemp -d /tmp/ddo-gpu-bench.XXXXXX)"
mkdir -p "$OUT" "$WORK/logs"
OUT="$(cd "$OUT" && pwd)"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
START=$(date +%s)

say() { printf 'gpu-bench: [%4ss] %s\n' "$(( $(date +%s) - START ))" "$*" | tee -a "$SUMMARY"; }

pack_logs() {
  cp -r "$WORK/logs" "$WORK/pack" 2>/dev/null
  find "$BUILD/bench" -name report.json -path '*_runs/*' 2>/dev/null | while read -r f; do
    d="$WORK/pack/reports/$(basename "$(dirname "$(dirname "$f")")")"; mkdir -p "$d"
    cp "$f" "$d/$(basename "$(dirname "$f")").json"
  done
  tar -C "$WORK/pack" -czf "$OUT/logs.tar.gz" . 2>/dev/null
}

status=0
say "root $ROOT, build $BUILD, carry $CARRY, dry run $DRY, python $PY"

# 1. Build + cuda tests + probe (their files go into the logs archive; their summary lines into ours).
if [ "${DDO_GPU_BENCH_SKIP_CHECKS:-0}" = 1 ] && [ -x "$BUILD/bin/ddo-host" ]; then
  say "gpu-checks skipped (DDO_GPU_BENCH_SKIP_CHECKS=1): reusing $BUILD"
else
  DDO_BUILD_DIR="$BUILD" DDO_GPU_CHECKS_DRY_RUN="$DRY" timeout 420 "$ROOT/tools/device/gpu-checks.sh" "$WORK/logs/checks" \
    >"$WORK/logs/gpu-checks.out" 2>&1
  rc=$?
  sed 's/^/  /' "$WORK/logs/checks/summary.txt" 2>/dev/null | tee -a "$SUMMARY" >/dev/null
  say "gpu-checks exit $rc$([ $rc -eq 124 ] && echo ' (timed out after 420 s)')"
  [ $rc -eq 0 ] || status=1
fi
[ -x "$BUILD/bin/ddo-host" ] || { say "FAILED: no $BUILD/bin/ddo-host; nothing to bench"; pack_logs; exit 1; }

# The carried libraries, for ddo-host and the plugins only (as gpu-checks.sh sets them for its tests): model_bench.py
# puts them on ddo-host's LD_LIBRARY_PATH, never on the Python controls', whose torch has its own.
export DDO_BENCH_HOST_LIBRARY_PATH="$CARRY/usr/lib/x86_64-linux-gnu"

# 2. Bench wheels (the device image has torch, accelerate, psutil, safetensors, pillow; not diffusers or DDO).
if ls "$CARRY"/wheels/*.whl >/dev/null 2>&1; then
  if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" "$CARRY"/wheels/*.whl \
       >"$WORK/logs/pip.log" 2>&1; then
    export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
    say "bench wheels installed: $(cd "$CARRY/wheels" && ls *.whl | tr '\n' ' ')"
  else
    say "bench wheels failed to install (see logs.tar.gz pip.log): the controls that need them will say so"
  fi
else
  say "no bench wheels in $CARRY/wheels (tools/device/prepare-carry.sh): using what $PY has"
fi
"$PY" -c 'import torch, diffusers; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "diffusers", diffusers.__version__)' \
  2>&1 | tail -1 | sed 's/^/  /' | tee -a "$SUMMARY" >/dev/null

# 3. The benches. Each run inside has its own time limit (--run-timeout); the whole bench has one too.
dry=(); [ "$DRY" = 1 ] && dry=(--dry-run)
common=(--device cuda --dtype bf16 --depth "$DEPTH" --size "$SIZE" --steps "$STEPS" --rounds "$ROUNDS" --python "$PY"
        --run-timeout 150 "${dry[@]}")
bench() {  # name limit_s args...
  local name=$1 limit=$2; shift 2
  say "bench $name: model_bench.py $*"
  PYTHONUNBUFFERED=1 timeout "$limit" "$PY" "$ROOT/tools/bench/model_bench.py" "$BUILD" --name "gpu_$name" "$@" \
    >"$WORK/logs/bench-$name.log" 2>&1
  local rc=$?
  tail -n 25 "$WORK/logs/bench-$name.log" | sed 's/^/  /' >>"$SUMMARY"
  for ext in md json; do
    [ -f "$BUILD/bench/gpu_$name.$ext" ] && cp "$BUILD/bench/gpu_$name.$ext" "$OUT/$name.$ext"
  done
  say "bench $name exit $rc$([ $rc -eq 124 ] && echo " (timed out after $limit s)")"
  [ $rc -eq 0 ] || status=1
}
bench streaming 330 "${common[@]}" --budget-gb "$BUDGET"
bench resident 150 "${common[@]}" --budget-gb 0 --variants "ddo off,diffusers"
if [ -n "$QUANT" ]; then
  qv="ddo off,ddo low_ram_safe"
  for q in ${QUANT//,/ }; do qv="$qv,ddo off $q,ddo low_ram_safe $q"; done
  bench quant 180 "${common[@]}" --depth "$QUANT_DEPTH" --budget-gb "$BUDGET" --quant "$QUANT" \
    --quant-presets off,low_ram_safe --variants "$qv"
fi

# 3b. The demo and the parity fixtures on the device, for their forecast beside CUDA's measured peaks (issue 42): the
#     demo's own command (tools/demo/run_demo.sh: low_ram_safe, text prompt, guidance, 256x256) on the text fixture's
#     checkpoint, the qwen_image_21 fixture at 1024x1024 on the disk route, the LTX-2.3 fixture at 96x96x9 with
#     guidance. Carried from here: build/fixtures/{qwen_image_21_text,qwen_image_21,ltx2_pipeline} (~7 MiB). Each run
#     has its own time limit; its report lands in $BUILD/bench/gpu_forecast_runs/ for step 4 and the logs archive.
FIX="${DDO_GPU_BENCH_FIXTURES:-$ROOT/build/fixtures}"
forecast_run() {  # name checkpoint_dir args...
  local name=$1 ckpt=$2; shift 2
  if [ ! -f "$ckpt/model_index.json" ]; then say "forecast run $name skipped: no $ckpt (carry build/fixtures/...)"; return; fi
  local dir="$BUILD/bench/gpu_forecast_runs/$name"; mkdir -p "$dir"
  LD_LIBRARY_PATH="$DDO_BENCH_HOST_LIBRARY_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 120 \
    "$BUILD/bin/ddo-host" --model "$ckpt" "$@" --output "$dir" --report "$dir/report.json" --overwrite -q \
    >"$WORK/logs/forecast-$name.log" 2>&1
  local rc=$?
  say "forecast run $name exit $rc$([ $rc -eq 124 ] && echo ' (timed out after 120 s)')"
  [ $rc -eq 0 ] || status=1
}
forecast_run demo "$FIX/qwen_image_21_text/checkpoint" --plugin qwen_image --preset low_ram_safe.toml \
  --set components.transformer.resident_budget_gb=0.0001 -p "a lighthouse at dusk, watercolor" -n "blurry, low quality" \
  --cfg-scale 4 --steps 4 --width 256 --height 256
forecast_run qwen_fixture_1024_disk "$FIX/qwen_image_21/checkpoint" --plugin qwen_image \
  --prompt-embeds "$FIX/qwen_image_21/prompt_embeds.safetensors" --steps 2 --width 1024 --height 1024 \
  --set components.transformer.route=disk
forecast_run ltx2_fixture_96x96x9 "$FIX/ltx2_pipeline/checkpoint_23" --plugin ltx2 \
  --prompt-embeds "$FIX/ltx2_pipeline/prompt_embeds.safetensors" --steps 2 --fps 25 --width 96 --height 96 --frames 9 \
  --cfg-scale 3

# 4. The memory forecast beside each bench run's measured peaks (issue 42, Note [Memory forecast]): per phase the
#    forecast against CUDA's caching-allocator peak plus the engine's buffers, from every ddo report the benches wrote.
say "memory forecast vs measured (tools/bench/forecast_summary.py over $BUILD/bench)"
"$PY" "$ROOT/tools/bench/forecast_summary.py" "$BUILD/bench" >"$WORK/logs/forecast.txt" 2>&1
tail -n 40 "$WORK/logs/forecast.txt" | sed 's/^/  /' >>"$SUMMARY"

pack_logs
say "result: $([ $status -eq 0 ] && echo PASS || echo FAIL); files in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
rm -rf "$WORK"
exit $status
