#!/usr/bin/env bash
# The official OpenAI Python client (PyPI `openai`) against `ddo-host serve` (issue 30's "done when"):
#   client.images.generate(model=..., prompt=..., size="256x256", response_format="b64_json", extra_body={...})
# on the demo checkpoint returns a PNG whose pixels equal the CLI's for the same settings and seed.
# The client lives in its own virtualenv, ~/.cache/ddo/client-venv (made once from the fixture venv's python,
# `pip install openai`): installing it into ~/.cache/ddo/venv would change every fixture cache key.
# Usage: tools/serve/openai_client_check.sh [BUILD_DIR]   (needs tools/ddo demo's checkpoint, or makes it)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build}" && pwd)"
VENV="$HOME/.cache/ddo/venv"
CLIENT="$HOME/.cache/ddo/client-venv"
HOST="$BUILD/bin/ddo-host"
CKPT="$BUILD/demo/qwen_image_21/inputs/checkpoint"
say() { printf 'openai check: %s\n' "$*"; }
[ -x "$HOST" ] || { echo "openai check: $HOST is missing; run tools/ddo build ddo_runtime_qwen_image_21" >&2; exit 1; }
if [ ! -x "$CLIENT/bin/python" ] || ! "$CLIENT/bin/python" -c 'import openai' 2>/dev/null; then
  say "creating $CLIENT with the openai client (once)"
  "$VENV/bin/python" -m venv "$CLIENT"
  "$CLIENT/bin/pip" install -q openai
fi
if [ ! -f "$CKPT/model_index.json" ]; then
  say "creating the demo checkpoint in $CKPT (once)"
  "$VENV/bin/python" "$ROOT/tools/reference/qwen_image_21_text_fixtures.py" --checkpoint-only --num-layers 6 \
    "$BUILD/demo/qwen_image_21/inputs" >/dev/null 2>&1
fi
WORK="$(mktemp -d)"
trap 'kill -TERM "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; rm -rf "$WORK"' EXIT
"$HOST" serve --plugin qwen_image --preset low_ram_safe.toml --model "$CKPT" --listen 127.0.0.1:0 \
  --state-dir "$WORK/state" >"$WORK/stdout" 2>"$WORK/stderr" &
PID=$!
for _ in $(seq 600); do grep -q "listening on" "$WORK/stdout" 2>/dev/null && break; sleep 0.1; done
URL="$(sed -n "s/^ddo-host serve: listening on \(http[^ ]*\).*/\1/p" "$WORK/stdout")"
[ -n "$URL" ] || { cat "$WORK/stderr"; echo "openai check: the server did not start" >&2; exit 1; }
say "server at $URL"
"$CLIENT/bin/python" - "$URL" "$WORK/served.png" <<'PY'
import base64, sys
from openai import OpenAI
client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="unused")
r = client.images.generate(model="qwen_image", prompt="a lighthouse at dusk, watercolor", size="256x256",
                           response_format="b64_json",
                           extra_body={"negative_prompt": "blurry, low quality", "seed": 7, "steps": 4,
                                       "guidance_scale": 4, "ddo": {"components.transformer.resident_budget_gb": 0.0001}})
open(sys.argv[2], "wb").write(base64.b64decode(r.data[0].b64_json))
print("openai client: 1 image,", len(r.data[0].b64_json), "base64 characters")
PY
"$HOST" -q --plugin qwen_image --preset low_ram_safe.toml --model "$CKPT" -p "a lighthouse at dusk, watercolor" \
  -n "blurry, low quality" --seed 7 --steps 4 --cfg-scale 4 --width 256 --height 256 \
  --set components.transformer.resident_budget_gb=0.0001 --output "$WORK/cli"
"$VENV/bin/python" - "$WORK/served.png" "$WORK/cli/image.png" <<'PY'
import sys
import numpy as np
from PIL import Image
a, b = (np.asarray(Image.open(p)).astype(int) for p in sys.argv[1:3])
d = int(np.abs(a - b).max()) if a.shape == b.shape else None
print(f"served {a.shape} vs CLI {b.shape}: max pixel difference {d}")
sys.exit(0 if d == 0 else 1)
PY
say "PASS: the OpenAI client's PNG equals the CLI's"
