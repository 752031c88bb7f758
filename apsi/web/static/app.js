// apsi web: the page's behaviour. Each form is a question to the JSON API (/api/<command>, the
// CLI's options by name); the answer streams (progress, then the JSON `apsi <command> --json`
// prints) and is drawn as tables and charts (charts.js). The question is kept in the URL, so every
// answer has a permalink; a bad option's one-line message appears beside its field.
"use strict";

let running = null;  // the AbortController of the question in flight

const $ = (sel, root) => (root || document).querySelector(sel);

function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  return node;
}

function table(rows, head) {
  const t = h("table");
  if (head) t.append(h("tr", {}, ...head.map(c => h("th", {}, c))));
  for (const r of rows) t.append(h("tr", {}, ...r.map((c, i) => (head ? h("td", {}, c) : i === 0 ? h("th", {}, c) : h("td", {}, c)))));
  return t;
}

function failure(err) { return err && err.name === "AbortError" ? "cancelled" : (err.error || err.message || String(err)); }

function put(parent, ...children) { parent.replaceChildren(...children.filter(c => c !== null && c !== undefined)); }

function money(x) { return x === null || x === undefined ? "" : "$" + fmt(x, 0); }

// --- asking -------------------------------------------------------------------------------------

function params(form) {
  const out = {};
  for (const input of form.querySelectorAll("input[name], select[name], textarea[name]")) {
    if (input.type === "file") continue;
    if (input.type === "checkbox") { if (input.checked) out[input.name] = "true"; continue; }
    if (input.value.trim() !== "") out[input.name] = input.value.trim();
  }
  return out;
}

function fill(form, values) {
  for (const [k, v] of Object.entries(values)) {
    const input = form.querySelector(`[name="${k}"]`);
    if (!input) continue;
    if (input.type === "checkbox") input.checked = v === "true";
    else input.value = v;
  }
}

function clearErrors(form) {
  form.querySelectorAll(".err").forEach(e => { e.textContent = ""; });
  form.querySelectorAll(".bad").forEach(e => e.classList.remove("bad"));
}

function showError(form, answer, message, field) {
  const spot = field && form.querySelector(`.err[data-for="${field}"]`);
  if (spot) {
    spot.textContent = message;
    const input = form.querySelector(`[name="${field}"]`);
    if (input) input.classList.add("bad");
    answer.replaceChildren();
  } else {
    answer.replaceChildren(h("p", {class: "error", role: "alert"}, message));
  }
}

// POST the question; read the NDJSON stream: progress lines, then the answer or the error.
async function ask(command, body, onProgress) {
  if (running) running.abort();
  const controller = new AbortController();
  running = controller;
  const started = Date.now();
  const status = $("#status"), text = $("#status-text");
  status.hidden = false;
  text.textContent = `apsi ${command}: working…`;
  const timer = setInterval(() => {
    text.textContent = text.textContent.replace(/ \(\d+ s\)$/, "") + ` (${Math.round((Date.now() - started) / 1000)} s)`;
  }, 1000);
  try {
    const response = await fetch(`/api/${command}`, {
      method: "POST", body: JSON.stringify(body), signal: controller.signal,
      headers: {"Content-Type": "application/json", "Accept": "application/x-ndjson"}});
    if (!response.ok && !response.body) throw {error: `the server answered ${response.status}`};
    const reader = response.body.getReader(), decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (value) buffer += decoder.decode(value, {stream: true});
      let nl;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, nl); buffer = buffer.slice(nl + 1);
        if (!line.trim()) continue;
        const msg = JSON.parse(line);
        if ("progress" in msg) { text.textContent = `apsi ${command}: ${msg.progress}`; if (onProgress) onProgress(msg.progress); }
        else if ("answer" in msg) return msg.answer;
        else if ("text" in msg) return msg.text;
        else if ("error" in msg) throw msg;
      }
      if (done) break;
    }
    if (!response.ok) {
      // An answer refused before the question ran (413, a body that is not JSON) is one JSON object.
      let msg = null;
      try { msg = JSON.parse(buffer); } catch (e) { /* not JSON: say the status */ }
      if (msg && typeof msg.error === "string") throw {error: msg.error, field: msg.field || null};
      if (msg && typeof msg.detail === "string") throw {error: msg.detail};
      throw {error: `the server answered ${response.status}`};
    }
    throw {error: "the answer ended early"};
  } finally {
    clearInterval(timer);
    if (running === controller) { running = null; status.hidden = true; }
  }
}

function download(name, text, type) {
  const a = h("a", {href: URL.createObjectURL(new Blob([text], {type})), download: name});
  document.body.append(a); a.click(); a.remove();
}

// A button that downloads the launch file of the question (/api/export/<command>, the format from
// `format()`), less the option `drop` that an export does not take; its error shown as the form's.
function launchButton(label, command, body, drop, format, form, answer) {
  const button = h("button", {type: "button"}, label);
  // A refusal is said beside the button: the answer above stays (it had been replaced by the error).
  const said = h("span", {class: "err launch-error", role: "alert"});
  button.onclick = async () => {
    said.textContent = "";
    const q = {...body, export: format()};
    delete q[drop];
    const response = await fetch(`/api/export/${command}`, {method: "POST", body: JSON.stringify(q), headers: {"Content-Type": "application/json"}});
    const text = await response.text();
    if (!response.ok) {
      let why = `the server answered ${response.status}`;
      try { why = JSON.parse(text).error || why; } catch (e) { /* not JSON: the status */ }
      said.textContent = why;
      return;
    }
    // The server names the file with its format's extension (.sh, .py, .sbatch).
    const named = (response.headers.get("content-disposition") || "").match(/filename="([^"]+)"/);
    download(named ? named[1] : `apsi-${format()}.sh`, text, "text/plain");
  };
  return h("span", {class: "launch"}, button, said);
}

function permalink(tab, values) {
  const q = new URLSearchParams({tab});
  let hash = "";
  for (const [k, v] of Object.entries(values)) {
    // The uploaded files ride in the fragment, which the browser never sends to the server.
    if (k === "config") hash = "#config=" + encodeURIComponent(JSON.stringify(v));
    else if (k === "fleet") hash = "#fleet=" + encodeURIComponent(v); else q.set(k, v);
  }
  history.replaceState(null, "", "?" + q.toString() + hash);
}

async function readFile(input) {
  const file = input && input.files && input.files[0];
  return file ? await file.text() : null;
}

// --- training -----------------------------------------------------------------------------------

function layoutText(l) {
  const parts = [`TP ${l.tp}`, `PP ${l.pp}`, `DP ${l.dp}`];
  if (l.cp > 1) parts.push(`CP ${l.cp}`);
  if (l.ep > 1) parts.push(`EP ${l.ep}`);
  let text = parts.join(" × ");
  if (l.vpp > 1) text += `, VPP ${l.vpp}`;
  text += `, micro-batch ${l.micro_batch_sequences}, recompute ${l.recompute}`;
  return text;
}

function planTable(p) {
  const rows = [
    ["Model", `${p.model.name} (${fmt(p.model.params / 1e9, 2)}B params${p.model.moe ? `, ${fmt(p.model.active_params / 1e9, 1)}B active` : ""})`],
    ["GPUs", h("span", {id: "plan-gpus", "data-gpus": p.gpus}, `${fmt(p.gpus, 0)} × ${p.gpu} (${fmt(p.nodes, 0)} nodes)`)],
    ["Layout", layoutText(p.layout)],
    ["Memory per GPU", `${fmt(p.memory_per_gpu_gib, 1)} GiB of ${fmt(p.memory.gpu_memory_gib, 0)} GiB (GiB = 2^30 bytes)`],
    ["Days", `${fmt(p.days, 1)} (range ${fmt(p.days_low, 1)}–${fmt(p.days_high, 1)}), target ${fmt(p.target_days, 0)}: ${p.target_met ? "met" : "missed"}`],
    ["Cost", `${money(p.cost_usd)} at $${fmt(p.price_usd_per_gpu_hour, 2)}/GPU-hour, ${fmt(p.gpu_hours, 0)} GPU-hours`],
    ["Energy", `${fmt(p.energy_mwh, 0)} MWh (PUE ${p.pue})`],
    ["MFU", `${fmt(p.mfu * 100, 1)}%, step ${fmt(p.step_seconds, 3)} s, ${fmt(p.tokens_per_gpu_second, 0)} tokens/s per GPU`],
    ["Framework", p.framework],
    ["Why", h("span", {class: "why"}, p.why)],
  ];
  if (p.serve) {
    const g = p.serve.groups.map(x => `${x.replicas} × TP ${x.tp} on ${x.gpu}`).join(" + ");
    rows.push(["Serving", `${g}: ${fmt(p.serve.gpus, 0)} GPUs for ${fmt(p.serve.requests_per_s, 1)} requests/s (${p.serve.engine})`]);
  } else if (p.serve_refused) {
    rows.push(["Serving", `none on ${p.gpu}; apsi serve on it says: ${p.serve_refused}`]);
  }
  return table(rows);
}

function levers(p) {
  if (!p.levers || !p.levers.length) return null;
  return h("div", {}, h("h3", {}, "Levers"),
           table(p.levers.map(l => [l.name, l.description]), ["lever", "what it gives"]));
}

let linkedConfig = null;  // a permalink's config.json text (#config=...), until a model is typed or a file chosen

// The model is the name typed or the config.json chosen (or linked), whichever came last: typing a
// name lets go of the file, choosing a file empties the name.
function oneModel(form) {
  const name = form.querySelector('input[name="params"]'), file = form.querySelector('input[name="config"]');
  name.addEventListener("input", () => { file.value = ""; linkedConfig = null; });
  file.addEventListener("change", () => { if (file.files.length) { name.value = ""; linkedConfig = null; } });
}

async function answerPlan(form, answer) {
  const body = params(form);
  // A file chosen, else the one a permalink carried (kept for the questions after it, as a file is).
  const config = (await readFile(form.querySelector('input[name="config"]'))) ?? linkedConfig;
  if (config !== null) {
    try { body.config = JSON.parse(config); } catch (e) { throw {error: "the config.json is not JSON: " + e.message, field: "config"}; }
    delete body.params;
  }
  permalink("plan", body);
  const plan = await ask("plan", body);
  // The launch format starts at the plan's own framework (megatron's otherwise: reference plans have none).
  const formats = window.apsiInfo.formats || [];
  const fmtSelect = h("select", {id: "export-format", "aria-label": "launch format"},
                      ...formats.map(f => h("option", f === plan.framework ? {selected: ""} : {}, f)));
  const exportButton = launchButton("Download launch script", "plan", body, "levers", () => fmtSelect.value, form, answer);
  const jsonButton = h("button", {type: "button"}, "Download JSON");
  jsonButton.onclick = () => download("plan.json", JSON.stringify(plan, null, 1), "application/json");
  const frontier = h("div", {class: "frontier"}, h("p", {class: "muted"}, "frontier: asking…"));
  put(answer,
    h("h2", {}, `${fmt(plan.gpus, 0)} × ${plan.gpu}, ${fmt(plan.days, 1)} days`),
    planTable(plan),
    h("div", {class: "buttons"}, jsonButton, fmtSelect, exportButton),
    h("h3", {}, "Memory per GPU"), memoryChart(plan),
    h("h3", {}, "Step time"), stepChart(plan),
    levers(plan),
    h("h3", {}, "Frontier: days against GPUs"), frontier,
    plan.notes && plan.notes.length ? h("ul", {class: "notes"}, ...plan.notes.map(n => h("li", {}, n))) : null);
  if (!body.largest) {
    const q = {...body};
    delete q.levers; delete q.include_consumer;
    if (!q.gpu || /,|any/i.test(q.gpu)) q.gpu = plan.gpu;
    try {
      const points = await ask("frontier", q, line => { frontier.firstChild.textContent = line; });
      frontier.replaceChildren(frontierChart(points, plan));
    } catch (err) {
      frontier.replaceChildren(h("p", {class: "muted"}, "frontier: " + failure(err)));
    }
  }
}

// --- serving ------------------------------------------------------------------------------------

function serveTable(s) {
  const head = ["role", "GPU", "TP", "PP", "EP", "replicas", "GPUs", "batch", "TTFT ms (p99)", "TPOT ms", "tokens/s per GPU"];
  const rows = s.groups.map(g => [g.role || "", g.gpu, g.tp, g.pp, g.ep, g.replicas, g.gpus, g.batch ?? "",
    g.ttft_ms !== undefined ? `${fmt(g.ttft_ms, 0)} (${fmt(g.ttft_p99_ms, 0)})` : "",
    g.tpot_ms !== undefined ? fmt(g.tpot_ms, 1) : "", g.output_tokens_per_s_per_gpu !== undefined ? fmt(g.output_tokens_per_s_per_gpu, 0) : ""]);
  return table(rows, head);
}

async function answerServe(form, answer) {
  const body = params(form);
  permalink("serve", body);
  const plan = await ask("serve", body);
  const jsonButton = h("button", {type: "button"}, "Download JSON");
  jsonButton.onclick = () => download("serve.json", JSON.stringify(plan, null, 1), "application/json");
  // A disaggregated plan has two pools and no one launch script (the CLI refuses --export with --disagg).
  const exportButton = plan.wins === undefined
    ? launchButton(`Download ${plan.engine} launch script`, "serve", body, "disagg", () => plan.engine, form, answer)
    : h("span", {class: "muted"}, "no launch script for a disaggregated plan (apsi serve --export writes the aggregated plan's)");
  const totals = [["GPUs", h("span", {id: "serve-gpus", "data-gpus": plan.gpus}, fmt(plan.gpus, 0))],
                  ["Requests/s", fmt(plan.requests_per_s, 2)], ["Output tokens/s", fmt(plan.output_tokens_per_s, 0)],
                  ["Cost", `$${fmt(plan.cost_usd_per_hour, 2)} per hour`]];
  if (plan.usd_per_million_output_tokens !== undefined) totals.push(["Per million output tokens", `$${fmt(plan.usd_per_million_output_tokens, 3)}`]);
  if (plan.aggregated_gpus !== undefined) totals.push(["Aggregated serving", `${fmt(plan.aggregated_gpus, 0)} GPUs: disaggregation ${plan.wins ? "wins" : "does not win"}`]);
  // A disaggregated plan's latencies are the pair's (prefill, KV transfer, decode), not a pool's.
  if (plan.wins !== undefined) {
    totals.push(["TTFT", h("span", {id: "serve-ttft"}, `${fmt(plan.ttft_ms, 0)} ms (p50 ${fmt(plan.ttft_p50_ms, 0)}, p90 ${fmt(plan.ttft_p90_ms, 0)}, p99 ${fmt(plan.ttft_p99_ms, 0)})`)]);
    totals.push(["TPOT", `${fmt(plan.tpot_ms, 1)} ms`]);
  }
  totals.push(["Why", h("span", {class: "why"}, plan.why)]);
  const frontier = h("div", {class: "frontier"}, h("p", {class: "muted"}, "frontier: asking…"));
  put(answer,
    h("h2", {}, `${fmt(plan.gpus, 0)} GPUs, ${plan.engine} ${plan.engine_version}`),
    table(totals), serveTable(plan), h("div", {class: "buttons"}, jsonButton, exportButton),
    h("h3", {}, "Frontier: tokens/s per GPU against per user"), frontier,
    plan.notes && plan.notes.length ? h("ul", {class: "notes"}, ...plan.notes.map(n => h("li", {}, n))) : null);
  // The frontier is one replica at every layout and batch: the question's own model, engine, GPUs
  // (an inventory's types), precisions, request and targets, less what sizes replicas for a load.
  const q = {...body, frontier: "true"};
  for (const k of ["rate", "concurrency", "inventory", "objective", "disagg"]) delete q[k];
  if (!q.gpu && body.inventory) q.gpu = String(body.inventory).split(",").map(x => x.split("=")[0].trim()).join(",");
  try {
    frontier.replaceChildren(serveFrontierChart(await ask("serve", q)));
  } catch (err) {
    frontier.replaceChildren(h("p", {class: "muted"}, "frontier: " + failure(err)));
  }
}

// --- fleet --------------------------------------------------------------------------------------

function utilisation(f) {
  const types = [...new Set(f.months.map(m => m.gpu_type))];
  const months = [...new Set(f.months.map(m => m.month))];
  const cell = (month, type) => {
    const m = f.months.find(x => x.month === month && x.gpu_type === type);
    if (!m || !m.mean_gpus_available) return "";
    const share = m.mean_gpus_used / m.mean_gpus_available;
    return h("span", {class: "use", style: `--share:${Math.min(1, share)}`, title: `${fmt(m.mean_gpus_used, 0)} of ${fmt(m.mean_gpus_available, 0)} GPUs in use on average`}, `${fmt(share * 100, 0)}%`);
  };
  return table(months.map(month => [month, ...types.map(t => cell(month, t))]), ["month", ...types.map(t => `${t} in use`)]);
}

async function answerFleet(form, answer) {
  const body = params(form);
  const file = await readFile(form.querySelector('input[name="fleet_file"]'));
  if (file !== null) { body.fleet = file; form.querySelector('textarea[name="fleet"]').value = file; }
  permalink("fleet", body);
  const f = await ask("fleet", body);
  const jsonButton = h("button", {type: "button"}, "Download JSON");
  jsonButton.onclick = () => download("fleet.json", JSON.stringify(f, null, 1), "application/json");
  const runs = f.runs.map(r => [r.name, r.scheduled ? `${fmt(r.gpus, 0)} × ${r.gpu_type}` : "not scheduled", r.layout_text || "",
                                r.start || "", r.end || "", r.deadline || "", r.late_days ? h("b", {class: "late"}, `${r.late_days} late`) : (r.slack_days ?? ""),
                                money(r.cost_usd)]);
  put(answer,
    h("h2", {id: "fleet-status", "data-late": f.late_runs}, `${f.status}: ${f.runs.filter(r => r.scheduled).length} runs scheduled, ${f.late_runs} late`),
    table([["Paid beyond owned", money(f.cost_usd)], ["GPU-hours", `${fmt(f.gpu_hours, 0)} (worth ${money(f.gpu_hours_usd)}, owned: not charged)`], ["Makespan", `${f.makespan_days} days`],
           ["Objective", f.objective.join(", then ")]].concat(f.conflict ? [["Conflict", f.conflict.text]] : [])),
    h("div", {class: "buttons"}, jsonButton),
    h("h3", {}, "Schedule"), gantt(f),
    h("h3", {}, "Runs"), table(runs, ["run", "GPUs", "layout", "start", "end", "deadline", "slack days", "value"]),
    h("h3", {}, "Utilisation"), utilisation(f),
    f.notes && f.notes.length ? h("ul", {class: "notes"}, ...f.notes.map(n => h("li", {}, n))) : null);
}

// --- the page -----------------------------------------------------------------------------------

const ANSWER = {plan: answerPlan, serve: answerServe, fleet: answerFleet};

function showTab(tab) {
  for (const b of document.querySelectorAll("nav button")) b.setAttribute("aria-selected", String(b.dataset.tab === tab));
  for (const s of document.querySelectorAll(".tab")) s.hidden = s.id !== `tab-${tab}`;
}

async function submit(form) {
  const command = form.dataset.command, answer = $(`#answer-${command}`);
  clearErrors(form);
  try {
    await ANSWER[command](form, answer);
  } catch (err) {
    if (err && err.name === "AbortError") { answer.replaceChildren(h("p", {class: "muted"}, "cancelled")); return; }
    showError(form, answer, err.error || err.message || String(err), err.field);
  }
}

async function start() {
  window.apsiInfo = await (await fetch("/api/info")).json();
  const info = window.apsiInfo;
  $("#models").replaceChildren(...info.models.map(m => h("option", {value: m})));
  $("#gpus").replaceChildren(...info.gpus.map(g => h("option", {value: g})), h("option", {value: "any"}));
  for (const select of document.querySelectorAll("select[data-list]")) {
    const list = info[select.dataset.list], def = info[select.dataset.list.replace(/s$/, "")];
    select.replaceChildren(...list.map(v => h("option", v === def ? {value: "", selected: ""} : {value: v}, v)));
  }
  for (const b of document.querySelectorAll("nav button")) b.onclick = () => showTab(b.dataset.tab);
  for (const form of document.querySelectorAll("form")) form.onsubmit = e => { e.preventDefault(); submit(form); };
  oneModel($("#form-plan"));
  $("#cancel").onclick = () => { if (running) running.abort(); };
  const q = new URLSearchParams(location.search), tab = q.get("tab");
  const fragment = new URLSearchParams(location.hash.slice(1)), fleet = fragment.get("fleet");
  linkedConfig = fragment.get("config");
  if (tab && ANSWER[tab]) {
    showTab(tab);
    const form = $(`#form-${tab}`), values = Object.fromEntries([...q].filter(([k]) => k !== "tab"));
    if (fleet) values.fleet = fleet;
    for (const input of form.querySelectorAll("input[name], select[name], textarea[name]")) {
      if (input.type === "checkbox") input.checked = false; else if (input.type !== "file") input.value = "";
    }
    fill(form, values);
    submit(form);
  }
}

start();
