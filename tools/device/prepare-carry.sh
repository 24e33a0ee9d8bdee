#!/usr/bin/env bash
# tools/device/prepare-carry.sh [BUILD_DIR]
# Fills shared-deps/ (ignored by git) with what a GPU machine that has nvcc, CMake, ninja and a
# compiler, but none of our Debian packages and no network, needs to build ddo and run its bench
# (the bench's Python wheels in shared-deps/wheels): the headers, CMake
# package configs, pkg-config files and libraries of our Debian dependencies, laid out as under /
# (shared-deps/usr/include, shared-deps/usr/lib/x86_64-linux-gnu, ...), plus pkgconf.
# Boost is too large to carry whole (160 MiB): only the Boost headers that BUILD_DIR's objects
# actually included (ninja -t deps) are copied, so BUILD_DIR must be a finished Ninja build of the
# current tree (default: build/). Run it here, then name shared-deps in the device tool's carry.
# See docs/validation.md, "Device checks".
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${1:-$ROOT/build}"
CARRY="${DDO_CARRY:-$ROOT/shared-deps}"
LIMIT_MIB="${DDO_CARRY_LIMIT_MIB:-48}"   # the device tool carries 64 MiB with the working tree

say() { printf 'prepare-carry: %s\n' "$*"; }
die() { printf 'prepare-carry: error: %s\n' "$*" >&2; exit 1; }

# Dev packages copied whole (headers, cmake configs, .pc, static/shared libs) and the runtime
# packages holding the shared libraries they link to.
WHOLE=(libtomlplusplus-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev libxxhash-dev
       libssl-dev libpng-dev zlib1g-dev libgtest-dev libgmock-dev libpcre2-dev libutf8proc-dev
       libsentencepiece-dev)
# Not carried: Debian's FFmpeg (libddo_media, the ltx2_video plugin): its runtime pulls 132 libraries, ~160 MiB
# (Note [FFmpeg on the GPU machine] in docs/architecture.md); the device build configures DDO_WITH_MEDIA=OFF.
BOOST_DEV=libboost1.74-dev

[ -f "$BUILD/build.ninja" ] || die "$BUILD is not a Ninja build; run 'tools/ddo build' (or pass a build dir) first"
command -v dpkg-query >/dev/null || die "dpkg-query not found: run this on the Debian development machine"
for p in "${WHOLE[@]}" "$BOOST_DEV" pkgconf; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || die "package $p is not installed (tools/ddo setup)"
done

rm -rf "$CARRY"
mkdir -p "$CARRY"

copy() {  # copy absolute paths into the carry, keeping symlinks and directories
  local f
  for f in "$@"; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    mkdir -p "$CARRY$(dirname "$f")"
    cp -a "$f" "$CARRY$f"
  done
}

# 1. Whole dev packages: every file they list (skipping docs and directories).
mapfile -t files < <(dpkg -L "${WHOLE[@]}" | grep -vE '^/usr/share/(doc|man|lintian)/' | sort -u)
for f in "${files[@]}"; do
  [ -d "$f" ] && [ ! -L "$f" ] && continue
  copy "$f"
done

# 2. The shared libraries the dev symlinks point to (libspdlog.so -> libspdlog.so.1.10 ...), from
#    their runtime packages, resolved through the dev package's .so links.
for link in $(find "$CARRY/usr/lib" -name '*.so' -type l); do
  target="$(readlink -f "${link#$CARRY}")"
  copy "$target"
  base="$(basename "$target")"
  # the SONAME link (libfoo.so.N) used at run time
  soname="$(objdump -p "$target" 2>/dev/null | awk '/SONAME/ {print $2}')"
  [ -n "$soname" ] && [ ! -e "$(dirname "$CARRY$target")/$soname" ] && ln -s "$base" "$(dirname "$CARRY$target")/$soname"
done

# 3. Boost: the config packages and only the headers this build included.
mapfile -t boost_cfg < <(dpkg -L "$BOOST_DEV" | grep -E '/cmake/(Boost-|boost_headers-|BoostDetectToolset)' )
for f in "${boost_cfg[@]}"; do
  [ -d "$f" ] && continue
  copy "$f"
done
mapfile -t boost_headers < <(cd "$BUILD" && ninja -t deps | grep -oE '/usr/include/boost/[^ ]+' | sort -u)
[ ${#boost_headers[@]} -gt 0 ] || die "no Boost header in $BUILD's dependency log; build it first"
copy "${boost_headers[@]}"
copy /usr/include/boost/version.hpp /usr/include/boost/config.hpp

# 4. pkgconf (CMake's FindPkgConfig needs an executable) and its library.
copy /usr/bin/pkgconf /usr/bin/pkg-config "$(readlink -f /usr/lib/x86_64-linux-gnu/libpkgconf.so.3)" /usr/lib/x86_64-linux-gnu/libpkgconf.so.3

# 5. Make the .pc files relocatable: prefix relative to where the file lies.
for pc in $(find "$CARRY" -name '*.pc'); do
  case "$pc" in
    */lib/x86_64-linux-gnu/pkgconfig/*) rel='${pcfiledir}/../../..' ;;
    */share/pkgconfig/*|*/lib/pkgconfig/*) rel='${pcfiledir}/../..' ;;
    *) continue ;;
  esac
  [ -L "$pc" ] && { cp --remove-destination "$(readlink -f "$pc")" "$pc"; }
  sed -i -E "s|^prefix=.*|prefix=$rel|" "$pc"
done

# 6. The model bench's Python wheels for the device's python (3.12; it has torch, accelerate, psutil, safetensors,
#    pillow, huggingface-hub but not these; gguf-py writes the quant bench's GGUF transformers): tools/device/gpu-bench.sh installs them with --no-index --no-deps.
#    DDO_CARRY_WHEELS=0 skips it (no registry here).
BENCH_WHEELS=(diffusers==0.42.1 diffusers-dynamic-offloader==0.1.0rc2 importlib_metadata==8.7.0 gguf==0.19.0)
if [ "${DDO_CARRY_WHEELS:-1}" != 0 ]; then
  VENV="${DDO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ddo/venv}"
  mkdir -p "$CARRY/wheels"
  "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d "$CARRY/wheels" \
    "${BENCH_WHEELS[@]}" || die "could not download the bench wheels (${BENCH_WHEELS[*]}); DDO_CARRY_WHEELS=0 skips them"
fi

cat > "$CARRY/README" <<EON
Carried build dependencies for tools/device/gpu-checks.sh, made by tools/device/prepare-carry.sh
from $(hostname) on $(date -u +%Y-%m-%dT%H:%M:%SZ) with build dir $BUILD.
Packages: ${WHOLE[*]} $BOOST_DEV (headers used by the build only) pkgconf
Bench wheels (wheels/): $(ls "$CARRY/wheels" 2>/dev/null | tr '\n' ' ')
EON

size_mib=$(( $(du -sk "$CARRY" | cut -f1) / 1024 ))
say "wrote $CARRY ($size_mib MiB, $(find "$CARRY" -type f | wc -l) files, ${#boost_headers[@]} Boost headers)"
[ "$size_mib" -le "$LIMIT_MIB" ] || die "$CARRY is $size_mib MiB, over the $LIMIT_MIB MiB budget (DDO_CARRY_LIMIT_MIB)"
