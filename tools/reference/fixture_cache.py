#!/usr/bin/env python3
"""Runs a tools/reference fixture script through a cache outside the clone (docs/validation.md, "Fixture cache").

Usage: fixture_cache.py NAME SCRIPT OUT_DIR [--depends FILE]... [-- SCRIPT_ARGS...]

The cache entry is ${DDO_FIXTURE_CACHE:-~/.cache/ddo/fixtures}/NAME-<key>/, where <key> is the SHA-256 of
  - the script's bytes, its arguments and every file named with --depends,
  - every tools/reference module the script imports, transitively (`import gemma3_fixtures`),
  - the Python version and every installed distribution's name and version (torch, diffusers, transformers, ...).
A changed script, helper module or reference package gives a new key, so the fixtures are generated again; an entry is
complete only when the script wrote its reference.json (written last by every script) and the entry was renamed into
place, so an interrupted generation never leaves a half set. Concurrent builds wait on one lock per entry. OUT_DIR is
then replaced by a copy of the entry (tests may write beside the fixtures; the cache stays as generated). Only the three
newest entries of NAME are kept.

DDO_FIXTURE_CACHE=off bypasses the cache: the script writes OUT_DIR directly, as before.
"""

import fcntl
import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KEEP_PER_NAME = 3
IMPORT_RE = re.compile(r"^\s*(?:import|from)\s+([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)


def local_modules(script: Path) -> list[Path]:
    """The tools/reference modules `script` imports, transitively, in a stable order."""
    seen: dict[str, Path] = {}
    todo = [script]
    while todo:
        text = todo.pop().read_text(encoding="utf-8")
        for name in IMPORT_RE.findall(text):
            candidate = script.parent / f"{name}.py"
            if name not in seen and candidate.is_file() and candidate != script:
                seen[name] = candidate
                todo.append(candidate)
    return [seen[k] for k in sorted(seen)]


def environment_lines() -> list[str]:
    dists = sorted({f"{d.metadata['Name'].lower()}=={d.version}" for d in importlib.metadata.distributions()
                    if d.metadata["Name"]})
    return [f"python {sys.version.split()[0]}"] + dists


def cache_key(script: Path, depends: list[Path], args: list[str]) -> str:
    h = hashlib.sha256(b"ddo-fixture-cache v1\n")

    def add(label: str, data: bytes) -> None:
        h.update(f"{label} {len(data)}\n".encode())
        h.update(data)

    add("script", script.read_bytes())
    add("args", "\0".join(args).encode())
    for dep in depends:
        add(f"depends {dep.name}", dep.read_bytes())
    for mod in local_modules(script):
        add(f"module {mod.name}", mod.read_bytes())
    add("environment", "\n".join(environment_lines()).encode())
    return h.hexdigest()[:20]


def prune(root: Path, name: str, keep: Path) -> None:
    entries = [p for p in root.glob(f"{name}-*") if p.is_dir() and re.fullmatch(rf"{re.escape(name)}-[0-9a-f]{{20}}", p.name)]
    entries.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in [p for p in entries if p != keep][KEEP_PER_NAME - 1:]:
        shutil.rmtree(old, ignore_errors=True)
        old.with_name(old.name + ".lock").unlink(missing_ok=True)


def generate(python: str, script: Path, out: Path, args: list[str]) -> None:
    subprocess.run([python, str(script), str(out), *args], check=True)
    if not (out / "reference.json").is_file():
        sys.exit(f"fixture_cache: {script.name} finished without writing {out}/reference.json (an incomplete set)")


def main() -> int:
    argv = sys.argv[1:]
    script_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, script_args = argv[:i], argv[i + 1:]
    depends: list[Path] = []
    positional: list[str] = []
    it = iter(argv)
    for a in it:
        if a == "--depends":
            depends.append(Path(next(it)))
        else:
            positional.append(a)
    if len(positional) != 3:
        sys.exit(__doc__)
    name, script, out = positional[0], Path(positional[1]).resolve(), Path(positional[2])
    python = sys.executable

    setting = os.environ.get("DDO_FIXTURE_CACHE", "")
    if setting == "off":
        generate(python, script, out, script_args)
        return 0
    root = Path(setting) if setting else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ddo" / "fixtures"
    root.mkdir(parents=True, exist_ok=True)
    key = cache_key(script, depends, script_args)
    entry = root / f"{name}-{key}"

    with open(root / f"{name}-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (entry / "reference.json").is_file():
            print(f"fixture_cache: {name}: cached {entry}", flush=True)
        else:
            started = time.monotonic()
            print(f"fixture_cache: {name}: generating with {script.name} into {entry}", flush=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
            try:
                generate(python, script, tmp, script_args)
                shutil.rmtree(entry, ignore_errors=True)
                os.chmod(tmp, 0o755)  # mkdtemp made it 0700
                os.rename(tmp, entry)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            print(f"fixture_cache: {name}: generated in {time.monotonic() - started:.1f} s", flush=True)
        os.utime(entry)
        prune(root, name, entry)
        # Replace OUT_DIR by a copy; reference.json last, so an interrupted copy is never taken as complete.
        if out.is_symlink() or out.is_file():
            out.unlink()
        elif out.exists():
            shutil.rmtree(out)
        shutil.copytree(entry, out, ignore=lambda d, names: ["reference.json"] if Path(d) == entry else [])
        shutil.copy2(entry / "reference.json", out / "reference.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
