// GET / of ddo-host serve: one static page, no framework and no build step. It posts POST /v1/jobs, follows
// GET /v1/jobs/{id}/events (Server-Sent Events) with a progress bar, shows the image when done and a summary of the
// run report. With --token-file the token is typed into the page (fetch sends it; the event stream is read through
// fetch too, since EventSource cannot send headers). `/?autorun&prompt=…&size=…&steps=…&seed=…` submits once on load.
#pragma once

namespace ddo::host::serve {

inline constexpr const char * kIndexPage = R"ddo_page(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>ddo-host serve</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
  body { font: 15px/1.4 system-ui, sans-serif; max-width: 760px; margin: 2em auto; padding: 0 1em; color: #222; }
  h1 { font-size: 1.3em; }
  label { display: block; margin: .6em 0 .2em; font-weight: 600; }
  textarea, input { width: 100%; box-sizing: border-box; font: inherit; padding: .3em; }
  .row { display: flex; gap: 1em; } .row > div { flex: 1; }
  button { margin-top: 1em; padding: .5em 1.5em; font: inherit; }
  progress { width: 100%; height: 1.2em; margin-top: 1em; }
  #status { margin-top: .5em; color: #555; }
  #error { color: #a00; white-space: pre-wrap; }
  #result img { max-width: 100%; margin-top: 1em; image-rendering: pixelated; border: 1px solid #ccc; }
  table { border-collapse: collapse; margin-top: 1em; } td { padding: .1em .8em .1em 0; vertical-align: top; }
</style>
</head>
<body>
<h1>ddo-host serve <small id="model"></small></h1>
<form id="form">
  <label for="prompt">Prompt</label>
  <textarea id="prompt" rows="3" required>a lighthouse at dusk, watercolor</textarea>
  <label for="negative">Negative prompt</label>
  <input id="negative" value="blurry, low quality">
  <div class="row">
    <div><label for="size">Size</label><input id="size" value="256x256" pattern="\d+x\d+"></div>
    <div><label for="steps">Steps</label><input id="steps" type="number" min="1" value="4"></div>
    <div><label for="seed">Seed (-1: random)</label><input id="seed" type="number" min="-1" value="0"></div>
  </div>
  <label for="token">Token (only with --token-file)</label>
  <input id="token" type="password" autocomplete="off">
  <button id="go" type="submit">Generate</button>
</form>
<progress id="bar" max="1" value="0"></progress>
<div id="status">idle</div>
<div id="trace" hidden></div>
<div id="error"></div>
<div id="result"></div>
<table id="summary"></table>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
function headers(extra) {
  const h = Object.assign({}, extra || {});
  const t = $("token").value.trim();
  if (t) h["Authorization"] = "Bearer " + t;
  return h;
}
async function api(path, opts) {
  const r = await fetch(path, Object.assign({}, opts, { headers: headers(opts && opts.headers) }));
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error((body.error && body.error.message) || ("HTTP " + r.status));
  return body;
}
// Server-Sent Events through fetch (EventSource cannot send the Authorization header).
async function follow(id, onEvent) {
  const r = await fetch("/v1/jobs/" + id + "/events", { headers: headers() });
  if (!r.ok) throw new Error("events: HTTP " + r.status);
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, cut); buf = buf.slice(cut + 2);
      let name = "message", data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) name = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      if (data) onEvent(name, JSON.parse(data));
    }
  }
}
function row(k, v) {
  const tr = document.createElement("tr");
  const a = document.createElement("td"); a.textContent = k;
  const b = document.createElement("td"); b.textContent = v;
  tr.append(a, b); $("summary").append(tr);
}
function summarize(job) {
  $("summary").textContent = "";
  const r = job.report || {};
  row("job", job.id);
  row("status", job.status + " (exit " + job.exit_code + ")");
  const mib = (b) => (b === null || b === undefined ? "n/a" : (b / 1048576).toFixed(1) + " MiB");
  if (r.timing && r.timing.tracked_total_host_s !== undefined) row("run time", r.timing.tracked_total_host_s.toFixed(2) + " s");
  const w = r.workload || {};
  if (w.width) row("workload", w.width + "x" + w.height + ", " + w.steps + " steps, seed " + w.seed + ", guidance " + w.guidance_scale);
  if (r.phases) row("phases", r.phases.map((p) => p.name + " " + (p.host_wall_s || 0).toFixed(2) + " s").join(", "));
  const m = r.memory || {};
  if (m.rss) row("peak RSS", mib(m.rss.peak_bytes));
  if (m.gpu_absolute && m.gpu_absolute.peak_bytes !== null) row("peak GPU memory", mib(m.gpu_absolute.peak_bytes));
  row("report", "/v1/jobs/" + job.id + "/outputs/ddo_report.json");
}
$("form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("go").disabled = true; $("error").textContent = ""; $("result").textContent = ""; $("summary").textContent = "";
  $("bar").value = 0; $("bar").max = 1;
  try {
    const [w, h] = $("size").value.split("x").map(Number);
    const body = { prompt: $("prompt").value, width: w, height: h, steps: Number($("steps").value), seed: Number($("seed").value) };
    if ($("negative").value) body.negative_prompt = $("negative").value;
    const sub = await api("/v1/jobs", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    $("status").textContent = "queued at position " + sub.position + " (" + sub.id + ")";
    await follow(sub.id, (name, d) => {
      if (name === "progress") {
        if (d.phase === "denoise" && d.total > 0) {
          $("bar").max = d.total; $("bar").value = d.step;
          $("trace").textContent += d.step + "/" + d.total + " ";  // the bar's values, in order (the page test reads them)
        }
        $("status").textContent = d.phase + (d.total ? " " + d.step + "/" + d.total : "");
      } else if (name === "started") $("status").textContent = "running";
      else if (name === "done") $("status").textContent = d.status;
    });
    const job = await api("/v1/jobs/" + sub.id);
    summarize(job);
    if (job.status !== "completed") throw new Error("job " + job.status + ": " + (job.error || ""));
    for (const o of job.outputs) {
      if (!o.name.endsWith(".png")) continue;
      const r = await fetch(o.url, { headers: headers() });
      const img = document.createElement("img");
      img.id = "image"; img.alt = o.name; img.src = URL.createObjectURL(await r.blob());
      $("result").append(img);
    }
  } catch (e) {
    $("error").textContent = String(e.message || e);
  } finally {
    $("go").disabled = false;
  }
});
// ?autorun: submit once on load with the form's values, after any prompt/size/steps/seed given in the query (the
// headless page test, tests/e2e/serve_page_test.sh).
const query = new URLSearchParams(location.search);
for (const k of ["prompt", "negative", "size", "steps", "seed"]) if (query.has(k)) $(k).value = query.get(k);
if (query.has("autorun")) $("form").requestSubmit();
api("/v1/models").then((m) => { $("model").textContent = "— " + m.data[0].id; }).catch(() => {});
</script>
</body>
</html>
)ddo_page";

}  // namespace ddo::host::serve
