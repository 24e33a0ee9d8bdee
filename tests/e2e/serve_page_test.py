#!/usr/bin/env python3
"""The page at / of ddo-host serve in headless Chromium (Debian `chromium`), driven over the DevTools protocol on a
pipe (--remote-debugging-pipe: no extra package). The page is opened with ?autorun (it submits its form once: a
prompt, 64x64, 6 steps, seed 3); the test reads the DOM until the job ends and checks that the progress bar moved
through the denoising steps (the page keeps the bar's values in #trace), that the image appeared (an <img id="image">
decoded, 64 px wide) and that the report summary says completed. The screenshot goes to ARTIFACT_DIR/serve_page.png.
Exit 77 (skipped) without Chromium or the checkpoint. Standard library only.

Usage: serve_page_test.py DDO_HOST CHECKPOINT_DIR ARTIFACT_DIR
"""
import base64, json, os, shutil, subprocess, sys, tempfile, time


def main():
    host, ckpt, art = sys.argv[1:4]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("[  SKIPPED ] chromium is not installed (apt-get install chromium)")
        return 77
    if not os.path.exists(os.path.join(ckpt, "model_index.json")):
        print(f"[  SKIPPED ] checkpoint {ckpt} is missing")
        return 77
    os.makedirs(art, exist_ok=True)
    work = tempfile.mkdtemp(prefix="ddo_serve_page_")
    srv = subprocess.Popen([host, "serve", "--plugin", "qwen_image", "--preset", "low_ram_safe.toml", "--model", ckpt,
                            "--listen", "127.0.0.1:0", "--state-dir", os.path.join(work, "state")],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    browser = None
    try:
        url = None
        for line in srv.stdout:
            if line.startswith("ddo-host serve: listening on "):
                url = line.split()[-1]
                break
        if not url:
            print("FAIL: the server did not start")
            return 1
        page = url + "/?autorun&prompt=a%20lighthouse%20at%20dusk&size=64x64&steps=6&seed=3"
        # fd 3: commands to Chromium, fd 4: its answers (NUL-separated JSON); dup2-ed in the child, kept by pass_fds.
        cmd_r, cmd_w = os.pipe()
        ans_r, ans_w = os.pipe()

        def child_fds():
            os.dup2(cmd_r, 3)
            os.dup2(ans_w, 4)

        browser = subprocess.Popen([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                    "--remote-debugging-pipe", "--user-data-dir=" + os.path.join(work, "profile"),
                                    "--window-size=820,1000", "about:blank"],
                                   preexec_fn=child_fds, pass_fds=(3, 4), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(ans_w)
        buf = b""
        next_id = [0]

        def call(method, params=None, session=None):
            next_id[0] += 1
            msg = {"id": next_id[0], "method": method, "params": params or {}}
            if session:
                msg["sessionId"] = session
            os.write(cmd_w, json.dumps(msg).encode() + b"\0")
            nonlocal buf
            while True:
                while b"\0" not in buf:
                    chunk = os.read(ans_r, 1 << 20)
                    if not chunk:
                        raise RuntimeError("chromium closed the pipe")
                    buf += chunk
                raw, buf = buf.split(b"\0", 1)
                m = json.loads(raw)
                if m.get("id") == next_id[0]:
                    if "error" in m:
                        raise RuntimeError(f"{method}: {m['error']}")
                    return m["result"]

        target = call("Target.createTarget", {"url": page})["targetId"]
        session = call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        probe = ("JSON.stringify({status: document.getElementById('status').textContent,"
                 " error: document.getElementById('error').textContent,"
                 " trace: document.getElementById('trace').textContent.trim(),"
                 " image: (() => { const i = document.getElementById('image');"
                 "   return i && i.complete ? i.naturalWidth : 0; })(),"
                 " summary: document.getElementById('summary').textContent})")
        state, values_seen = {}, []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            r = call("Runtime.evaluate", {"expression": probe, "returnByValue": True}, session)
            if "value" not in r.get("result", {}):  # the page is not there yet (an exception: no #status)
                time.sleep(0.2)
                continue
            state = json.loads(r["result"]["value"])
            if state["trace"] and state["trace"] not in values_seen:
                values_seen.append(state["trace"])
            if state["image"] or state["error"]:
                break
            time.sleep(0.2)
        shot = call("Page.captureScreenshot", {"format": "png"}, session)
        with open(os.path.join(art, "serve_page.png"), "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        print("page state:", json.dumps(state))
        print("progress bar values seen while polling:", values_seen)
        fail = 0

        def check(ok, what):
            nonlocal fail
            print(("ok: " if ok else "FAIL: ") + what)
            fail |= not ok

        trace = state.get("trace", "").split()
        check(state.get("error", "x") == "", "no error on the page")
        check(len(trace) >= 2 and trace[-1] == "6/6", f"the progress bar moved through the steps ({' '.join(trace)})")
        check(state.get("image") == 64, "the image appeared (64 px wide, decoded)")
        check("completed (exit 0)" in state.get("summary", ""), "the report summary says completed")
        print("screenshot:", os.path.join(art, "serve_page.png"))
        try:
            call("Browser.close")
        except RuntimeError:
            pass
        return 1 if fail else 0
    finally:
        if browser:
            try:
                browser.wait(timeout=10)
            except subprocess.TimeoutExpired:
                browser.kill()
        srv.terminate()
        srv.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
