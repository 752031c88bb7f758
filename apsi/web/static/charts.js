// apsi web: the charts, drawn as SVG from the API's JSON (no library: the page works offline).
// Each function takes an answer and returns an <svg> element; the numbers are the JSON's, the
// labels carry their units (GiB = 2^30 bytes).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const PALETTE = ["#3b6ea8", "#e08a2c", "#4f9d57", "#c4453c", "#8c6bb1", "#7f7f7f", "#b8a230", "#2aa3b0"];

function el(name, attrs, text) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function svg(width, height, label) {
  return el("svg", {viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "aria-label": label,
                    class: "chart"});
}

function tip(node, text) { node.appendChild(el("title", {}, text)); return node; }

function fmt(x, digits) {
  return Number(x).toLocaleString("en-US", {maximumFractionDigits: digits ?? 1});
}

// Memory per GPU on each pipeline stage (bars), against the GPU's memory and what is usable;
// beside it, the peak stage split into weights, gradients, optimizer, activations and reserve.
function memoryChart(plan) {
  const m = plan.memory, stages = m.stages_gib && m.stages_gib.length ? m.stages_gib : [m.total_gib];
  const W = 760, H = 240, left = 48, bottom = 28, top = 16, barsW = 360;
  const top_gib = Math.max(m.gpu_memory_gib, ...stages);
  const y = g => top + (H - top - bottom) * (1 - g / top_gib);
  const s = svg(W, H, "memory per GPU by pipeline stage");
  for (const g of [0, top_gib / 2, top_gib]) {
    s.appendChild(el("text", {x: left - 6, y: y(g) + 4, "text-anchor": "end", class: "tick"}, fmt(g, 0)));
  }
  s.appendChild(el("text", {x: 4, y: 12, class: "tick"}, "GiB"));
  const bw = Math.min(40, barsW / stages.length - 4);
  stages.forEach((g, i) => {
    const x = left + 4 + i * (barsW / stages.length);
    const bar = el("rect", {x, y: y(g), width: bw, height: y(0) - y(g),
                            class: i === m.peak_stage ? "bar peak" : "bar"});
    s.appendChild(tip(bar, `stage ${i}: ${fmt(g, 2)} GiB per GPU`));
    if (stages.length <= 16) s.appendChild(el("text", {x: x + bw / 2, y: H - bottom + 14, "text-anchor": "middle", class: "tick"}, String(i)));
  });
  s.appendChild(el("text", {x: left + barsW / 2, y: H - 2, "text-anchor": "middle", class: "tick"}, "pipeline stage"));
  s.appendChild(el("line", {x1: left, x2: left + barsW, y1: y(m.gpu_memory_gib), y2: y(m.gpu_memory_gib), class: "limit"}));
  s.appendChild(el("line", {x1: left, x2: left + barsW, y1: y(m.usable_gib), y2: y(m.usable_gib), class: "limit dashed"}));
  s.appendChild(el("text", {x: left + barsW + 4, y: y(m.gpu_memory_gib) + 4, class: "tick"},
                   `GPU ${fmt(m.gpu_memory_gib, 1)}, usable ${fmt(m.usable_gib, 1)} (dashed)`));
  const parts = [["weights", m.weights_gib], ["gradients", m.gradients_gib], ["optimizer", m.optimizer_gib],
                 ["activations", m.activations_gib], ["logits", m.logits_gib], ["reserve", m.reserve_gib]];
  let base = 0, row = 0;
  const px = left + barsW + 150;
  parts.forEach(([name, g], i) => {
    if (!g) return;
    const r = el("rect", {x: px, y: y(base + g), width: 36, height: y(base) - y(base + g), fill: PALETTE[i]});
    s.appendChild(tip(r, `${name}: ${fmt(g, 2)} GiB`));
    s.appendChild(el("rect", {x: px + 44, y: H - bottom - 12 - 14 * row, width: 9, height: 9, fill: PALETTE[i]}));
    s.appendChild(el("text", {x: px + 58, y: H - bottom - 4 - 14 * row, class: "tick"}, `${name} ${fmt(g, 1)} GiB`));
    base += g; row += 1;
  });
  s.appendChild(el("text", {x: px, y: H - 2, class: "tick"}, `stage ${m.peak_stage}`));
  return s;
}

// One training step split into what the time model adds up: compute, the exposed communication of
// each parallel dimension, the pipeline bubble, the optimizer step.
function stepChart(plan) {
  const t = plan.time, W = 760, H = 74, left = 8, width = W - 16;
  // The reference arithmetic has no step-time model (its MFU is given): nothing to split.
  if (!t) return h("p", {class: "muted"}, "no step-time model under the reference arithmetic (its MFU is given)");
  const parts = [["compute", t.compute_seconds], ["TP", t.tp_seconds], ["CP", t.cp_seconds], ["EP", t.ep_seconds],
                 ["PP", t.pp_seconds], ["bubble", t.bubble_seconds], ["DP", t.dp_seconds],
                 ["optimizer", t.optimizer_seconds]];
  const total = parts.reduce((a, [, v]) => a + (v || 0), 0) || 1;
  const s = svg(W, H, "step time breakdown");
  let x = left, legend = left;
  parts.forEach(([name, v], i) => {
    if (!v) return;
    const w = width * v / total;
    s.appendChild(tip(el("rect", {x, y: 8, width: Math.max(w, 0.5), height: 26, fill: PALETTE[i]}),
                      `${name}: ${fmt(v * 1000, 1)} ms`));
    x += w;
    const label = `${name} ${fmt(v * 1000, v < 0.01 ? 1 : 0)} ms`;
    s.appendChild(el("rect", {x: legend, y: 42, width: 9, height: 9, fill: PALETTE[i]}));
    s.appendChild(el("text", {x: legend + 12, y: 50, class: "tick"}, label));
    legend += 12 + 6.2 * label.length + 10;
  });
  s.appendChild(el("text", {x: left, y: 68, class: "tick"}, `step ${fmt(t.step_seconds, 3)} s (what the time model adds up; hover a part for its figure)`));
  return s;
}

function logAxis(lo, hi, a, b) {
  const l = Math.log(lo), h = Math.log(hi === lo ? hi * 2 : hi);
  return v => a + (b - a) * (Math.log(v) - l) / (h - l);
}

// Days against GPUs over the training frontier (log GPUs), the target line, the plan marked.
function frontierChart(points, plan) {
  const W = 760, H = 260, left = 50, right = 16, top = 14, bottom = 34;
  const s = svg(W, H, "days against GPUs");
  if (!points.length) return s;
  const gs = points.map(p => p.gpus), ds = points.map(p => p.days);
  const x = logAxis(Math.min(...gs), Math.max(...gs), left, W - right);
  const target = plan && plan.target_days ? plan.target_days : null;
  const yLo = Math.min(...ds, target || Infinity), yHi = Math.max(...ds, target || 0);
  const y = logAxis(yLo, yHi, H - bottom, top);
  s.appendChild(el("line", {x1: left, x2: W - right, y1: H - bottom, y2: H - bottom, class: "axis"}));
  s.appendChild(el("text", {x: 4, y: 12, class: "tick"}, "days (log scale)"));
  s.appendChild(el("text", {x: W - right, y: H - 2, "text-anchor": "end", class: "tick"}, "GPUs (log scale)"));
  for (const d of [yLo, Math.sqrt(yLo * yHi), yHi]) s.appendChild(el("text", {x: left - 6, y: y(d) + 4, "text-anchor": "end", class: "tick"}, fmt(d, d < 10 ? 1 : 0)));
  for (const g of [gs[0], gs[Math.floor(gs.length / 2)], gs[gs.length - 1]]) s.appendChild(el("text", {x: x(g), y: H - bottom + 14, "text-anchor": "middle", class: "tick"}, fmt(g, 0)));
  if (plan && plan.target_days) {
    s.appendChild(el("line", {x1: left, x2: W - right, y1: y(plan.target_days), y2: y(plan.target_days), class: "limit dashed"}));
    s.appendChild(el("text", {x: W - right, y: y(plan.target_days) - 4, "text-anchor": "end", class: "tick"}, `target ${fmt(plan.target_days, 0)} d`));
  }
  s.appendChild(el("polyline", {points: points.map(p => `${x(p.gpus)},${y(p.days)}`).join(" "), class: "line"}));
  for (const p of points) {
    const mine = plan && p.gpus === plan.gpus;
    s.appendChild(tip(el("circle", {cx: x(p.gpus), cy: y(p.days), r: mine ? 6 : 3, class: mine ? "dot mine" : "dot"}),
                      `${fmt(p.gpus, 0)} GPUs: ${fmt(p.days, 1)} days`));
  }
  return s;
}

// Serving frontier: output tokens/s per GPU against per user, one dot per layout and batch.
function serveFrontierChart(points) {
  const W = 760, H = 260, left = 56, right = 16, top = 14, bottom = 34;
  const s = svg(W, H, "tokens per second per GPU against per user");
  if (!points.length) return s;
  const xs = points.map(p => p.output_tokens_per_s_per_user), ys = points.map(p => p.output_tokens_per_s_per_gpu);
  const x = v => left + (W - left - right) * v / Math.max(...xs);
  const y = v => top + (H - top - bottom) * (1 - v / Math.max(...ys));
  s.appendChild(el("text", {x: 4, y: 12, class: "tick"}, "output tokens/s per GPU"));
  s.appendChild(el("text", {x: W - right, y: H - 2, "text-anchor": "end", class: "tick"}, "output tokens/s per user"));
  s.appendChild(el("line", {x1: left, x2: W - right, y1: y(0), y2: y(0), class: "axis"}));
  for (const v of [0, Math.max(...ys) / 2, Math.max(...ys)]) s.appendChild(el("text", {x: left - 6, y: y(v) + 4, "text-anchor": "end", class: "tick"}, fmt(v, 0)));
  for (const v of [0, Math.max(...xs) / 2, Math.max(...xs)]) s.appendChild(el("text", {x: x(v), y: H - bottom + 14, "text-anchor": "middle", class: "tick"}, fmt(v, 0)));
  const kinds = [...new Set(points.map(p => `${p.gpu} TP ${p.tp}`))];
  points.forEach(p => {
    const k = kinds.indexOf(`${p.gpu} TP ${p.tp}`);
    s.appendChild(tip(el("circle", {cx: x(p.output_tokens_per_s_per_user), cy: y(p.output_tokens_per_s_per_gpu), r: 3, fill: PALETTE[k % PALETTE.length]}),
                      `${p.gpu} TP ${p.tp} PP ${p.pp}, batch ${p.batch}: ${fmt(p.output_tokens_per_s_per_gpu, 0)} tok/s/GPU, ${fmt(p.output_tokens_per_s_per_user, 1)} tok/s/user, TPOT ${fmt(p.tpot_ms, 1)} ms`));
  });
  kinds.slice(0, 8).forEach((k, i) => s.appendChild(el("text", {x: W - right - 110, y: top + 12 * (i + 1), fill: PALETTE[i], class: "tick"}, k)));
  return s;
}

// The fleet's schedule: one row per scheduled run, from its start to its end, coloured by GPU
// type; a late run outlined red with its deadline marked; monthly ticks from the horizon's start.
function gantt(fleet) {
  const runs = fleet.runs.filter(r => r.scheduled);
  const row = 22, left = 250, right = 16, top = 26, W = 1000;
  const H = top + row * runs.length + 10;
  const s = svg(W, H, "fleet schedule");
  const horizon = Math.max(fleet.horizon_days, ...runs.map(r => r.start_day + r.days));
  const x = d => left + (W - left - right) * d / horizon;
  const start = new Date(fleet.start + "T00:00:00Z");
  for (let m = 0; ; m++) {
    const day = new Date(Date.UTC(start.getUTCFullYear(), start.getUTCMonth() + m, 1));
    const d = (day - start) / 86400000;
    if (d > horizon) break;
    if (d < 0) continue;
    s.appendChild(el("line", {x1: x(d), x2: x(d), y1: top - 6, y2: H - 6, class: "grid"}));
    s.appendChild(el("text", {x: x(d) + 2, y: top - 10, class: "tick"}, day.toISOString().slice(0, 7)));
  }
  const types = [...new Set(runs.flatMap(r => (r.segments && r.segments.length ? r.segments : [r]).map(b => b.gpu_type)))];
  runs.forEach((r, i) => {
    const yy = top + i * row;
    s.appendChild(el("text", {x: left - 6, y: yy + 14, "text-anchor": "end", class: "tick"}, r.name));
    // An elastic run: one bar per segment (r.segments); a fixed run: one bar.
    const bars = r.segments && r.segments.length ? r.segments : [r];
    bars.forEach(b => {
      const bar = el("rect", {x: x(b.start_day), y: yy + 2, width: Math.max(2, x(b.start_day + b.days) - x(b.start_day)),
                              height: row - 6, fill: PALETTE[types.indexOf(b.gpu_type) % PALETTE.length],
                              class: r.late_days > 0 ? "run late" : "run", "data-run": r.name});
      s.appendChild(tip(bar, `${r.name}: ${fmt(b.gpus, 0)} x ${b.gpu_type}, ${b.layout_text}, ${b.start} to ${b.end}` +
                        ` (${fmt(b.run_days ?? b.days, 1)} days)` + (r.deadline ? `, deadline ${r.deadline}` : "") +
                        (r.late_days > 0 ? `, ${r.late_days} days late` : "") + `\n${r.why}`));
    });
    if (r.deadline && r.late_days > 0) {
      const dd = (new Date(r.deadline + "T00:00:00Z") - start) / 86400000;
      s.appendChild(el("line", {x1: x(dd), x2: x(dd), y1: yy, y2: yy + row - 2, class: "deadline"}));
    }
  });
  types.forEach((t, i) => s.appendChild(el("text", {x: 4 + 70 * i, y: 12, fill: PALETTE[i % PALETTE.length], class: "tick"}, t)));
  return s;
}
