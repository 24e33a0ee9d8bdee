#!/usr/bin/env bash
# tools/device/gpu-checks.sh OUT_DIR
# On a GPU machine with nvcc, CMake, ninja and a compiler but none of our Debian packages and no
# network: configures ddo against the carried dependencies in shared-deps/ (made here by
# tools/device/prepare-carry.sh), builds it (with LibTorch from python3's torch when it imports, so the
# engine/transport/staging cuda tests build too), runs `ctest -L cuda` and
# `ddo-vmm-probe --backend cuda` (and --backend host as a control), and writes every log and a
# summary to OUT_DIR. Exit 0 only when the build succeeded, no cuda test failed, at least one ran
# (skips alone do not pass) and the CUDA probe passed.
#
# Environment:
#   DDO_CARRY            carried deps (default <repo>/shared-deps)
#   DDO_BUILD_DIR        build dir (default <repo>/build-gpu)
#   DDO_GPU_CHECKS_JOBS  build jobs (default nproc)
#   DDO_GPU_CHECKS_TORCH auto (default) = build the LibTorch parts when python3 imports torch (Torch_DIR
#                        from it), else without them and say so; 1 = required; 0 = never
#   DDO_GPU_CHECKS_DRY_RUN 1 = CPU dry run: CMake may find packages ONLY in the carry (CUDA toolkit
#                        included, so it is absent and every cuda test must skip); for checking the
#                        carry on the development machine. Needs no GPU.
#   DDO_GPU_CHECKS_TARGETS space-separated build targets (default: all)
# See docs/validation.md, "Device checks".
set -uo pipefail

OUT="${1:?usage: tools/device/gpu-checks.sh OUT_DIR}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CARRY="${DDO_CARRY:-$ROOT/shared-deps}"
BUILD="${DDO_BUILD_DIR:-$ROOT/build-gpu}"
JOBS="${DDO_GPU_CHECKS_JOBS:-$(nproc)}"
DRY="${DDO_GPU_CHECKS_DRY_RUN:-0}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"

say() { printf 'gpu-checks: %s\n' "$*" | tee -a "$SUMMARY"; }
die() { say "FAILED: $*"; exit 1; }

[ -d "$CARRY/usr/include" ] || die "no carried dependencies at $CARRY; run tools/device/prepare-carry.sh on the development machine and carry shared-deps"
command -v cmake >/dev/null || die "cmake not found on PATH"
command -v ninja >/dev/null || die "ninja not found on PATH"

ARCH_LIB="$CARRY/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$ARCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PKG_CONFIG_PATH="$ARCH_LIB/pkgconfig:$CARRY/usr/share/pkgconfig"
export PKG_CONFIG_LIBDIR="$PKG_CONFIG_PATH"   # never the machine's own .pc files
export PKG_CONFIG_SYSROOT_DIR=""
PKGCONF="$CARRY/usr/bin/pkgconf"

# Identity of the machine and toolchain, for the record.
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -a)"
  echo "git: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "cmake: $(cmake --version | head -1)"
  echo "ninja: $(ninja --version)"
  echo "c++: $(c++ --version 2>/dev/null | head -1)"
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo none)"
  echo "carry: $(head -2 "$CARRY/README" 2>/dev/null | tr '\n' ' ')"
  nvidia-smi 2>&1 || echo "nvidia-smi: not available"
} >"$OUT/environment.txt" 2>&1

CUDA_ROOT="${CUDA_HOME:-${CUDA_PATH:-}}"
if [ -z "$CUDA_ROOT" ] && command -v nvcc >/dev/null; then
  CUDA_ROOT="$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")"
fi
CUDA_ROOT="${CUDA_ROOT:-/usr/local/cuda}"

args=(-S "$ROOT" -B "$BUILD" -G Ninja
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
  -DDDO_BUILD_TESTS=ON
  -DDDO_WITH_MEDIA=OFF  # FFmpeg is not carried (prepare-carry.sh): no libddo_media / ltx2_video on the device
  -DPKG_CONFIG_EXECUTABLE="$PKGCONF"
  "-DCMAKE_C_FLAGS=-isystem $CARRY/usr/include/x86_64-linux-gnu"
  "-DCMAKE_CXX_FLAGS=-isystem $CARRY/usr/include/x86_64-linux-gnu")
if [ "$DRY" = 1 ]; then
  say "dry run: packages are looked up only under $CARRY (no CUDA toolkit: cuda tests must skip)"
  args+=(-DDDO_WITH_TORCH=OFF "-DCMAKE_FIND_ROOT_PATH=$CARRY"
    -DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=ONLY -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY
    -DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY -DCMAKE_FIND_ROOT_PATH_MODE_PROGRAM=NEVER
    -DCUDAToolkit_ROOT=/nonexistent "-DCMAKE_PREFIX_PATH=/usr")
else
  args+=("-DCMAKE_PREFIX_PATH=$CARRY/usr" "-DCUDAToolkit_ROOT=$CUDA_ROOT")
  want_torch="${DDO_GPU_CHECKS_TORCH:-auto}"
  torch_dir=""
  if [ "$want_torch" != 0 ]; then
    torch_dir="$(python3 -c 'import torch, os; print(os.path.join(torch.utils.cmake_prefix_path, "Torch"))' 2>/dev/null)" \
      || torch_dir=""
    [ -n "$torch_dir" ] || [ "$want_torch" != 1 ] || die "DDO_GPU_CHECKS_TORCH=1 but python3 cannot import torch"
  fi
  if [ -n "$torch_dir" ]; then
    say "LibTorch from python3's torch: $torch_dir (engine, transport and staging cuda tests are built)"
    args+=(-DDDO_WITH_TORCH=ON "-DTorch_DIR=$torch_dir")
  else
    say "building WITHOUT LibTorch (DDO_GPU_CHECKS_TORCH=$want_torch): the engine/transport cuda tests are not built"
    args+=(-DDDO_WITH_TORCH=OFF)
  fi
fi

say "configuring $BUILD"
cmake "${args[@]}" >"$OUT/configure.log" 2>&1 || die "configure failed; see configure.log"
grep -E "ddo: (torch|fingerprint)" "$OUT/configure.log" | tee -a "$SUMMARY"

targets=(${DDO_GPU_CHECKS_TARGETS:-all})
say "building (${targets[*]}) with $JOBS jobs"
cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" >"$OUT/build.log" 2>&1 || die "build failed; see build.log"

say "ctest -L cuda"
(cd "$BUILD" && ctest -L cuda --output-on-failure --timeout 300 >"$OUT/ctest-cuda.log" 2>&1)
ctest_rc=$?
total=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#' "$OUT/ctest-cuda.log")
skipped=$(grep -cE '\*\*\*Skipped' "$OUT/ctest-cuda.log")
failed=$(grep -cE '\*\*\*Failed|\*\*\*Exception|\*\*\*Timeout|Not Run' "$OUT/ctest-cuda.log")
passed=$((total - skipped - failed))
say "cuda tests: $total total, $passed passed, $skipped skipped, $failed failed (ctest exit $ctest_rc)"
if [ "$skipped" -gt 0 ] && [ -x "$BUILD/tests/bin/vmm_cuda_tests" ]; then
  reason="$("$BUILD/tests/bin/vmm_cuda_tests" --gtest_filter='*Negotiates*' 2>&1 | grep -m1 'no CUDA device')"
  say "  skip reason: ${reason:-none printed}"
fi

say "ddo-vmm-probe --backend cuda"
"$BUILD/bin/ddo-vmm-probe" --backend cuda >"$OUT/probe-cuda.json" 2>"$OUT/probe-cuda.stderr"
probe_rc=$?
"$BUILD/bin/ddo-vmm-probe" --backend host >"$OUT/probe-host.json" 2>"$OUT/probe-host.stderr"
host_rc=$?
say "probe: cuda exit $probe_rc, host exit $host_rc (0 = every check passed; 4 = backend unavailable)"
if [ "$probe_rc" -ne 0 ]; then
  # The registry does not pass the plugin's reasons on; --library (direct dlopen) does.
  "$BUILD/bin/ddo-vmm-probe" --backend cuda --library "$BUILD/lib/ddo/plugins/libddo_allocator_vmm.so" \
    >"$OUT/probe-cuda-reasons.json" 2>&1
  grep -E '"ok": false' -B2 "$OUT/probe-cuda-reasons.json" | grep '"detail"' | head -3 | sed 's/^ */  failed check: /' | tee -a "$SUMMARY"
fi

status=0
[ "$ctest_rc" -eq 0 ] && [ "$failed" -eq 0 ] || status=1
[ "$host_rc" -eq 0 ] || status=1
if [ "$DRY" = 1 ]; then
  # Without CUDA every cuda test must be a skip, and the probe must say "unavailable".
  [ "$passed" -eq 0 ] && [ "$probe_rc" -eq 4 ] || status=1
else
  [ "$passed" -gt 0 ] || { say "no cuda test ran (all skipped): no usable GPU?"; status=1; }
  [ "$probe_rc" -eq 0 ] || status=1
fi
say "result: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
