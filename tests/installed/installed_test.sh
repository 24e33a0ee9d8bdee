#!/usr/bin/env bash
# The `installed` layer (docs/validation.md): the tree `cmake --install` lays out works on its own. One step per
# ctest test; they share WORK (outside the build tree, so that the build tree can be hidden):
#   install   cmake --install BUILD --prefix WORK/prefix; copies the demo inputs and the example's sources
#   verify    WORK/prefix/bin/ddo-host verify: every installed artifact hashes to its installed manifest
#   demo      qwen_image_21 from the installed tree on the fixture checkpoint, preset found under share/ddo/presets
#   example   examples/one_block built against WORK/prefix/lib/cmake/ddo, its manifest entry written by
#             `ddo-host manifest add`, run from a --plugin-dir, its PNG compared with its PyTorch reference
#   tamper    the example plugin with one byte flipped: the run exits 3, verify exits 3
#   cleanup   removes WORK
# demo, example and tamper run with the source and build trees out of reach: a private mount namespace binds an
# empty directory over both (unshare -m, or unshare -rm as a non-root user), so any path into them fails.
# Usage: installed_test.sh STEP SRC BUILD WORK PYTHON
set -euo pipefail
STEP=$1 SRC=$2 BUILD=$3 WORK=$4 PY=$5
PREFIX="$WORK/prefix"
HOST="$PREFIX/bin/ddo-host"
say() { printf 'installed[%s]: %s\n' "$STEP" "$*"; }
fail() { printf 'installed[%s]: FAIL: %s\n' "$STEP" "$*" >&2; exit 1; }

# Runs "$@" with SRC and BUILD hidden behind an empty directory.
hidden() {
  mkdir -p "$WORK/empty"
  # BUILD first: when BUILD lies inside SRC it must be bound before SRC hides it.
  local inner2='mount --bind "$0" "$2" && mount --bind "$0" "$1" || exit 90; shift 2; exec "$@"'
  if unshare -m true 2>/dev/null; then
    unshare -m sh -c "$inner2" "$WORK/empty" "$SRC" "$BUILD" "$@"
  elif unshare -rm true 2>/dev/null; then
    unshare -rm sh -c "$inner2" "$WORK/empty" "$SRC" "$BUILD" "$@"
  else
    echo "SKIP: cannot hide the source and build trees (no mount namespace: unshare -m and -rm refused)"
    exit 77
  fi
}

case "$STEP" in
install)
  rm -rf "$WORK"
  mkdir -p "$WORK"
  cmake --install "$BUILD" --prefix "$PREFIX" >"$WORK/install.log"
  say "installed $(grep -c '^-- Installing' "$WORK/install.log") files into $PREFIX"
  for f in bin/ddo-host lib/libddo_core.so.0 lib/libddo_model.so.0 lib/ddo/plugins/artifacts.toml \
           include/ddo/model/model_run.hpp include/ddo/build_info.h share/ddo/presets/low_ram_safe.toml \
           lib/cmake/ddo/ddoConfig.cmake; do
    [ -e "$PREFIX/$f" ] || fail "$PREFIX/$f is missing"
  done
  if [ -e "$PREFIX/lib/ddo/plugins/libddo_model_ltx2_video.so" ] && [ ! -e "$PREFIX/lib/libddo_media.so.0" ]; then
    fail "the ltx2_video plugin is installed without the lib/libddo_media.so.0 it links"
  fi
  for so in "$PREFIX/lib/ddo/plugins/"*.so; do
    if readelf -d "$so" | grep -q 'R.*PATH'; then fail "$so has an RPATH/RUNPATH (Note [Plugin dependencies])"; fi
  done
  mkdir -p "$WORK/inputs"
  cp -r "$BUILD/fixtures/qwen_image_21/checkpoint" "$WORK/inputs/checkpoint"
  cp "$BUILD/fixtures/qwen_image_21/prompt_embeds.safetensors" "$WORK/inputs/"
  cp -r "$SRC/examples/one_block" "$WORK/example_src"
  ;;
verify)
  out=$("$HOST" verify) || fail "verify exited $?: $out"
  echo "$out"
  n=$(grep -c '^\[\[artifact\]\]' "$PREFIX/lib/ddo/plugins/artifacts.toml")
  grep -q "^$n of $n artifact(s) verified" <<<"$out" || fail "expected $n of $n verified"
  ;;
demo)
  rm -rf "$WORK/demo_out"
  hidden "$HOST" --plugin qwen_image --preset low_ram_safe --model "$WORK/inputs/checkpoint" \
    --prompt-embeds "$WORK/inputs/prompt_embeds.safetensors" --steps 2 --width 64 --height 64 \
    --set components.transformer.resident_budget_gb=0.00003 --output "$WORK/demo_out"
  "$PY" - "$WORK/demo_out/ddo_report.json" "$PREFIX" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "completed", r["status"]
assert r["outputs"] and r["outputs"][0]["sha256"], r["outputs"]
preset = r["identity"]["preset"]["file"]
assert preset.startswith(sys.argv[2] + "/share/ddo/presets/"), preset
t = r["counters"]["transformer"]
print(f"installed demo: completed, preset {preset}, transformer route {t['route']}, "
      f"{t['bytes_streamed']} bytes streamed, unloaded in phase {t['unloaded_in_phase']}")
PYEOF
  ;;
example)
  rm -rf "$WORK/example_build" "$WORK/plugins" "$WORK/one_block_model" "$WORK/example_out"
  mkdir -p "$WORK/plugins"
  hidden cmake -S "$WORK/example_src" -B "$WORK/example_build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -Dddo_DIR="$PREFIX/lib/cmake/ddo" >"$WORK/example_configure.log" || { cat "$WORK/example_configure.log"; fail "configure"; }
  hidden cmake --build "$WORK/example_build" || fail "build"
  cp "$WORK/example_build/libddo_model_one_block.so" "$WORK/plugins/"
  hidden "$HOST" manifest add "$WORK/plugins/libddo_model_one_block.so"
  "$PY" "$WORK/example_src/reference.py" make "$WORK/one_block_model"
  hidden "$HOST" --plugin-dir "$WORK/plugins" --plugin one_block --preset low_ram_safe \
    --model "$WORK/one_block_model" --width 24 --height 16 --steps 3 --seed 5 --output "$WORK/example_out"
  "$PY" "$WORK/example_src/reference.py" check "$WORK/one_block_model" "$WORK/example_out/image.png" \
    --width 24 --height 16 --steps 3 --seed 5
  # A checkpoint of the other installed model: refused before the run, naming the plugin that takes it.
  set +e
  hidden "$HOST" --plugin-dir "$WORK/plugins" --plugin one_block --model "$WORK/inputs/checkpoint" \
    --output "$WORK/wrong_model_out" >"$WORK/wrong_model.log" 2>&1
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || { cat "$WORK/wrong_model.log"; fail "one_block on a Qwen-Image checkpoint exited $rc, expected 2"; }
  grep -q "Plugin 'qwen_image_21' takes it: run with --plugin qwen_image_21" "$WORK/wrong_model.log" \
    || { cat "$WORK/wrong_model.log"; fail "the refusal does not name qwen_image_21"; }
  say "one_block on a QwenImage21Pipeline checkpoint: exit 2, names --plugin qwen_image_21"
  ;;
tamper)
  rm -rf "$WORK/plugins_tampered"
  cp -r "$WORK/plugins" "$WORK/plugins_tampered"
  so="$WORK/plugins_tampered/libddo_model_one_block.so"
  size=$(stat -c %s "$so")
  "$PY" -c "import sys; p=sys.argv[1]; o=int(sys.argv[2]); b=bytearray(open(p,'rb').read()); b[o]^=0xff; open(p,'wb').write(b)" "$so" $((size / 2))
  set +e
  hidden "$HOST" --plugin-dir "$WORK/plugins_tampered" --plugin one_block --model "$WORK/one_block_model" \
    --output "$WORK/tampered_out" >"$WORK/tamper.log" 2>&1
  rc=$?
  "$HOST" verify --plugin-dir "$WORK/plugins_tampered" >"$WORK/tamper_verify.log" 2>&1
  vrc=$?
  set -e
  cat "$WORK/tamper.log"
  [ "$rc" -eq 3 ] || fail "the run on a tampered plugin exited $rc, expected 3"
  [ "$vrc" -eq 3 ] || fail "verify of a tampered plugin exited $vrc, expected 3"
  grep -q "sha256 mismatch" "$WORK/tamper.log" || fail "the refusal does not say 'sha256 mismatch'"
  say "one flipped byte: run exit $rc, verify exit $vrc (sha256 mismatch)"
  ;;
cleanup)
  rm -rf "$WORK"
  ;;
*) fail "unknown step $STEP" ;;
esac
