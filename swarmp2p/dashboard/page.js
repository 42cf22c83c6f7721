"use strict";
// The dashboard page: renders the `view` the server computed (swarmp2p/dashboard/view.py).
// Plain DOM + inline SVG, no library, no CDN. Every value goes in through textContent or
// setAttribute, never as markup: peer ids, tasks and completions come from the network.
const NS = "http://www.w3.org/2000/svg";
const COLORS = ["#2563eb", "#dc6803", "#067647", "#9e77ed", "#e31b54", "#0e9384", "#854a0e", "#5b6473",
  "#0ba5ec", "#c11574", "#66c61c", "#1b1f27"];
const $ = (id) => document.getElementById(id);
const isNum = (x) => typeof x === "number" && isFinite(x);
const fmt = (x, digits) => isNum(x) ? x.toFixed(digits) : "–";
function text(id, value) {
  $(id).textContent = (value === null || value === undefined || value === "") ? "–" : String(value);
}
function svg(tag, attrs, content) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (content !== undefined) node.textContent = content;
  return node;
}
function el(tag, cls, content) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (content !== undefined) node.textContent = content;
  return node;
}
function cell(tr, value, cls) {
  const td = el("td", cls, (value === null || value === undefined) ? "–" : String(value));
  tr.appendChild(td); return td;
}
function niceStep(range, count) {
  const raw = range / Math.max(1, count), mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const norm = raw / mag;
  return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
}
function fmtTick(v, step) {
  if (Math.abs(v) >= 1e4 || (Math.abs(v) > 0 && Math.abs(v) < 1e-3)) return v.toExponential(1);
  const digits = Math.max(0, Math.min(6, -Math.floor(Math.log10(step))));
  return v.toFixed(digits);
}
// series: [{label, points: [[x, y]], band: [[x, lo, hi]], dash}]; the y axis fits the data (a
// flat 0-1 axis made 0.05 vs 0.09 a flat line); the legend sits above the plot, never on it.
function drawChart(chart, series, opts) {
  chart.replaceChildren();
  const W = +chart.getAttribute("width"), H = +chart.getAttribute("height");
  const shown = series.filter(s => s.points && s.points.length);
  const legend = shown.length > 1 || shown.some(s => s.band && s.band.length) || opts.legend;
  const L = 58, R = 14, B = 36;
  // The legend above the plot, wrapped onto as many lines as it needs (never over the data).
  const legendWidth = (label) => 28 + 6.5 * label.length;
  const legendLabels = shown.flatMap(s => (s.band && s.band.length) ? [s.label, s.band_label || "range"] : [s.label]);
  let legendLines = 1;
  for (let x = L, i = 0; i < legendLabels.length; i++) {
    if (x > L && x + legendWidth(legendLabels[i]) > W - R) { legendLines++; x = L; }
    x += legendWidth(legendLabels[i]);
  }
  const T = legend ? 14 + 16 * legendLines : 12;
  if (!shown.length) {
    chart.appendChild(svg("text", {x: W / 2, y: H / 2, "text-anchor": "middle", fill: "#5b6473"}, opts.empty));
    return;
  }
  const xs = [], ys = [];
  for (const s of shown) {
    for (const p of s.points) { xs.push(p[0]); ys.push(p[1]); }
    for (const b of s.band || []) { ys.push(b[1], b[2]); }
  }
  let x0 = Math.min(...xs), x1 = Math.max(...xs);
  // The data's own x range (the rounds played so far), when the view gives one: a lone early
  // point then sits on the rounds it belongs to, not on an axis padded into negative rounds.
  const range = Array.isArray(opts.xRange) ? opts.xRange : null;
  if (range) { x0 = Math.min(x0, range[0]); x1 = Math.max(x1, range[1]); }
  if (x0 === x1) { if (range) x1 += 1; else { x0 -= 1; x1 += 1; } }
  let y0 = Math.min(...ys), y1 = Math.max(...ys);
  const floor0 = y0 >= 0;  // rewards, accuracies, norms: an axis below zero would be empty
  if (y1 - y0 < 1e-9) { const pad = Math.abs(y0) * 0.1 || 0.05; y0 -= pad; y1 += pad; }
  if (floor0 && y0 < 0) y0 = 0;
  const step = niceStep(y1 - y0, 4);
  y0 = Math.floor(y0 / step) * step; y1 = Math.ceil(y1 / step) * step;
  const sx = (x) => L + (x - x0) / (x1 - x0) * (W - L - R);
  const sy = (y) => H - B - (y - y0) / (y1 - y0) * (H - T - B);
  for (let i = 0; y0 + i * step <= y1 + step / 2 && i < 20; i++) {
    let y = y0 + i * step; if (Math.abs(y) < step * 1e-6) y = 0;
    chart.appendChild(svg("line", {x1: L, x2: W - R, y1: sy(y), y2: sy(y), stroke: "#eef0f4"}));
    chart.appendChild(svg("text", {x: L - 6, y: sy(y) + 4, "text-anchor": "end", "font-size": 11,
      fill: "#5b6473"}, fmtTick(y, step)));
  }
  const xstep = Math.max(1, niceStep(x1 - x0, 6));
  const ticks = [];
  for (let x = Math.ceil(x0 / xstep) * xstep, i = 0; x <= x1 && i < 20; x += xstep, i++) ticks.push(x);
  // A named first point (the evaluation before training): its name, and no number beside it.
  const start = isNum(opts.startX) && opts.startX === x0 ? opts.startX : null;
  const labels = ticks.filter(x => start === null || sx(x) - sx(start) > 40).map(x => [x, String(Math.round(x * 100) / 100)]);
  if (start !== null) labels.unshift([start, opts.startLabel]);
  for (const [x, label] of labels) {
    chart.appendChild(svg("line", {x1: sx(x), x2: sx(x), y1: H - B, y2: H - B + 4, stroke: "#98a2b3"}));
    chart.appendChild(svg("text", {x: sx(x), y: H - B + 16, "text-anchor": "middle", "font-size": 11,
      fill: "#5b6473"}, label));
  }
  chart.appendChild(svg("line", {x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#98a2b3"}));
  chart.appendChild(svg("text", {x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle", "font-size": 11,
    fill: "#1d2330"}, opts.xlabel || "round"));
  if (opts.ylabel) chart.appendChild(svg("text", {x: 12, y: (T + H - B) / 2, "text-anchor": "middle",
    "font-size": 11, fill: "#1d2330", transform: "rotate(-90 12 " + (T + H - B) / 2 + ")"}, opts.ylabel));
  let legendX = L, legendY = 0;
  const addLegend = (label, color, kind) => {
    if (legendX > L && legendX + legendWidth(label) > W - R) { legendX = L; legendY += 16; }
    if (kind === "band") chart.appendChild(svg("rect", {x: legendX, y: legendY + 9, width: 14, height: 10, fill: color, "fill-opacity": 0.18}));
    else chart.appendChild(svg("rect", {x: legendX, y: legendY + 12, width: 14, height: 3, fill: color}));
    chart.appendChild(svg("text", {x: legendX + 18, y: legendY + 18, "font-size": 11, fill: "#1d2330"}, label));
    legendX += legendWidth(label);
  };
  shown.forEach((s, i) => {
    const color = s.color || COLORS[i % COLORS.length];
    if (s.band && s.band.length) {
      const top = s.band.map(b => sx(b[0]).toFixed(1) + "," + sy(b[2]).toFixed(1));
      const bottom = s.band.slice().reverse().map(b => sx(b[0]).toFixed(1) + "," + sy(b[1]).toFixed(1));
      chart.appendChild(svg("polygon", {points: top.concat(bottom).join(" "), fill: color, "fill-opacity": 0.15}));
    }
    const d = s.points.map((p, j) => (j ? "L" : "M") + sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join("");
    const line = {d: d, fill: "none", stroke: color, "stroke-width": 2, class: "series"};
    if (s.dash) line["stroke-dasharray"] = "5 4";
    chart.appendChild(svg("path", line));
    if (s.points.length <= 120) for (const p of s.points) {
      const dot = svg("circle", {cx: sx(p[0]), cy: sy(p[1]), r: 2.6, fill: color});
      dot.appendChild(svg("title", {}, s.label + " · " + (opts.xlabel || "round") + " " + p[0] + ": " + fmt(p[1], 4)));
      chart.appendChild(dot);
    }
    if (legend) {
      addLegend(s.label, color, "line");
      if (s.band && s.band.length) addLegend(s.band_label || "range", color, "band");
    }
  });
}
function nameCell(tr, name, peerId) {
  cell(tr, name, "l"); const id = cell(tr, peerId ? peerId.slice(0, 12) + "…" + peerId.slice(-6) : "", "id");
  if (peerId) id.title = peerId;
}
let emptyNote = "none yet";  // a node's tables fill as it runs; a finished report's never will
function fillTable(id, rows, fill) {
  const body = $(id); body.replaceChildren();
  for (const row of rows) { const tr = document.createElement("tr"); fill(tr, row); body.appendChild(tr); }
  if (!rows.length) {
    const tr = document.createElement("tr"), cols = body.closest("table").querySelectorAll("th").length || 1;
    const td = cell(tr, emptyNote, "l muted"); td.colSpan = cols; body.appendChild(tr);
  }
}
let schedule = null;
function tick() {
  if (!schedule) { text("countdown", null); $("clock").textContent = ""; return; }
  const since = Date.now() - schedule.genesis_ms;
  if (since < 0) { text("countdown", Math.ceil(-since / 1000) + " s"); $("clock").textContent = "before round 0"; return; }
  const into = since % schedule.round_ms, r = Math.floor(since / schedule.round_ms);
  const stageMs = schedule.round_ms / schedule.stage_count;
  text("countdown", Math.ceil((schedule.round_ms - into) / 1000) + " s");
  $("clock").textContent = "swarm clock: round " + r + ", stage " + (Math.floor(into / stageMs) + 1) + "/" +
    schedule.stage_count;
}
// A chain node's submissions (ChainCoordinator.status()): failures in a row are the first thing
// an operator must see (its rewards are not on the contract), not a counter in a closed table.
function renderChain(chain) {
  $("chain_card").style.display = chain ? "" : "none";
  if (!chain) return;
  const failing = isNum(chain.failing_in_a_row) ? chain.failing_in_a_row : 0;
  const value = $("chain_subs");
  value.textContent = failing ? failing + " failing in a row" : (chain.submitted || 0) + " on chain";
  value.className = "v" + (failing ? " bad" : "");
  $("chain_note").textContent = failing ? "last: " + (chain.last_error || "unknown") :
    (chain.late_skipped || 0) + " late, skipped · " + (chain.failed || 0) + " failed in all";
}
// A node's busy-host pace (view.pace): "normal", or "busy host" and what it does now, since when.
function renderPace(pace) {
  $("pace_card").style.display = pace ? "" : "none";
  if (!pace) return;
  $("pace").textContent = pace.label;
  $("pace").className = "v" + (pace.busy ? " warn" : "");
  $("pace_note").textContent = pace.detail || "";
}

function render(body) {
  const v = body.view || {};
  $("source").textContent = v.source && v.source !== "node" ? "· " + v.source : "";
  text("swarm_id", v.swarm_id);
  $("me_label").textContent = v.me ? "this peer" : "source";
  text("me_name", v.me ? v.me.name : body.peer_id);
  $("peer_id").textContent = v.me ? v.me.peer_id : "";
  text("round", body.round); text("phase", body.phase);
  text("peer_count", body.peer_count);
  text("last_reward", fmt(v.last_reward, 3));
  renderChain(body.chain || null);
  renderPace(v.pace || null);
  schedule = v.schedule || null; tick();
  const last = body.eval || null;
  text("eval_accuracy", last ? fmt(last.accuracy, 3) : null);
  const change = last ? last.accuracy_change : null;
  $("eval_change").textContent = isNum(change) ? (change >= 0 ? "+" : "") + change.toFixed(3) + " since last" : "";
  $("reward_note").textContent = v.rounds_recorded ? v.rounds_recorded + " rounds recorded" : "";
  drawChart($("chart"), v.reward_series || [], {empty: "no rounds yet", ylabel: "reward"});
  const evalX = body.eval_x || "round";
  const live = !v.source || v.source === "node";
  emptyNote = live ? "none yet" : "none in this " + v.source;
  drawChart($("evalchart"), v.eval_series || [], {empty: live ? "no held-out evaluation yet" :
    "no held-out evaluation in this " + v.source, xlabel: evalX,
    ylabel: "accuracy / reward", legend: true, startX: v.eval_start, startLabel: "start", xRange: v.eval_range});
  let note = last && last.simulated ? "simulated learner: accuracy is its simulated skill" : "";
  if (last && isNum(last.questions)) note += (note ? " · " : "") + last.questions + " questions" +
    (isNum(last.seconds) ? " in " + last.seconds.toFixed(1) + " s" : "");
  const progress = body.eval_progress;  // a node's next point, answered in slices
  if (progress && isNum(progress.units) && isNum(progress.done)) note += (note ? " · " : "") + "next point: " +
    progress.done + " of " + progress.units + " slices answered";
  const slices = last && Array.isArray(last.slices) ? last.slices : [];
  if (slices.length > 1) note += " · last point in " + slices.length + " slices, weights of " +
    slices.map(p => p.round === null ? "start" : "round " + p.round).join(", ");
  const deferred = body.eval_deferred;
  if (deferred) note += " · deferred in round " + deferred.round + ": " + fmt(deferred.needed_s, 1) + " s needed, " +
    fmt(deferred.left_s, 1) + " s left";
  $("eval_note").textContent = note;
  const train = $("train"); train.replaceChildren();
  for (const metric of v.train_series || []) {
    const box = el("div", "small"); box.appendChild(el("div", "note", metric.label));
    const chart = svg("svg", {class: "chart", width: 420, height: 170, viewBox: "0 0 420 170", role: "img",
      "aria-label": metric.label, "data-metric": metric.key});
    box.appendChild(chart); train.appendChild(box);
    drawChart(chart, [{label: metric.label, points: metric.points}], {empty: "none"});
  }
  if (!(v.train_series || []).length) train.appendChild(el("div", "note", "no training metrics recorded"));
  $("leaderboard_note").textContent = v.leaderboard_note || "";
  fillTable("leaderboard", v.leaderboard || [], (tr, r) => {
    cell(tr, r.rank); nameCell(tr, r.name, r.peer_id); cell(tr, fmt(r.reward, 3));
    cell(tr, isNum(r.rounds) ? r.rounds : "–"); cell(tr, r.note || "", "l");
  });
  $("contributions_box").style.display = v.me ? "" : "none";
  fillTable("contributions", v.contributions || [], (tr, r) => {
    nameCell(tr, r.name, r.peer_id); cell(tr, r.accepted);
    cell(tr, isNum(r.rejected) ? r.rejected : "–"); cell(tr, r.sampled);
    cell(tr, isNum(r.last_round) ? r.last_round : "–");
    const state = cell(tr, r.banned ? "banned" : (r.connected ? "connected" : "seen"), "l");
    if (r.banned) state.className = "l bad";
  });
  const most = Math.max(1, ...(v.rejections || []).map(r => r[1]));
  fillTable("rejections", v.rejections || [], (tr, r) => {
    cell(tr, r[0], "l"); cell(tr, r[1]);
    const td = cell(tr, "", "l"); const bar = el("span", "bar"); bar.style.width = (6 * r[1] / most) + "rem";
    td.appendChild(bar);
  });
  fillTable("rounds", v.rounds || [], (tr, r) => {
    cell(tr, r.round); cell(tr, fmt(r.reward, 3));
    cell(tr, isNum(r.rollouts_in) ? (Number.isInteger(r.rollouts_in) ? r.rollouts_in : r.rollouts_in.toFixed(1)) : "–");
    cell(tr, isNum(r.rollouts_out) ? r.rollouts_out : "–");
    cell(tr, isNum(r.rejected) ? r.rejected : "–"); cell(tr, r.reasons || r.note, "l");
    cell(tr, isNum(r.accuracy) ? fmt(r.accuracy, 3) : "");
  });
  const feed = $("feed"); feed.replaceChildren();
  for (const item of v.feed || []) {
    const entry = el("div", "entry"), head = el("div", "head");
    head.appendChild(el("span", "badge " + item.verdict, item.verdict));
    head.appendChild(el("b", "", item.name || "?"));
    head.appendChild(el("span", "muted", "round " + item.round));
    head.appendChild(el("span", "", item.task + (isNum(item.index) ? " #" + item.index : "")));
    if (item.reason) head.appendChild(el("span", "bad", item.reason));
    entry.appendChild(head);
    if (item.question) entry.appendChild(el("div", "text", item.question));
    for (const c of item.completions || []) {
      const line = el("div", "text");
      line.appendChild(el("span", isNum(c.reward) && c.reward > 0.5 ? "ok" : "muted", "[" + fmt(c.reward, 2) + "] "));
      line.appendChild(document.createTextNode(c.text.length > 300 ? c.text.slice(0, 300) + "…" : c.text));
      entry.appendChild(line);
    }
    feed.appendChild(entry);
  }
  if (!(v.feed || []).length) feed.appendChild(el("div", "note", "no rollouts recorded in this status"));
  $("summary_box").style.display = (v.summary || []).length ? "" : "none";
  fillTable("summary", v.summary || [], (tr, r) => { cell(tr, r[0], "l"); cell(tr, r[1], "l"); });
  const perTask = (last && last.per_task) || {};
  fillTable("eval_tasks", Object.keys(perTask).sort(), (tr, name) => {
    const t = perTask[name] || {};
    cell(tr, name, "l"); cell(tr, fmt(t.accuracy, 3)); cell(tr, fmt(t.reward, 3)); cell(tr, isNum(t.n) ? t.n : "–");
  });
  fillTable("eval_samples", (last && Array.isArray(last.samples)) ? last.samples : [], (tr, s) => {
    cell(tr, String(s.task), "l"); cell(tr, s.correct ? "yes" : "no", s.correct ? "ok" : "bad");
    cell(tr, fmt(s.reward, 2)); cell(tr, String(s.reference), "text");
    const full = String(s.completion), long = full.length > 800;
    const shown = cell(tr, long ? full.slice(0, 800) + "…" : full, "text"); if (long) shown.title = full;
  });
  const counters = body.counters || {};
  fillTable("counters", Object.keys(counters).sort(), (tr, k) => { cell(tr, k, "l"); cell(tr, counters[k]); });
}
async function refresh() {
  try {
    // The view carries what the page draws: the raw history (up to 10,000 records) stays behind.
    const response = await fetch("api/status?history=0", {cache: "no-store"});
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || ("HTTP " + response.status));
    render(body);
    $("state").textContent = "updated " + new Date().toLocaleTimeString(); $("state").className = "";
  } catch (error) {
    $("state").textContent = "no status: " + error.message; $("state").className = "bad";
  }
}
const inline = JSON.parse($("inline-status").textContent);
if (inline) {  // a static report: the status is in the page, nothing to poll
  render(inline); $("state").textContent = "static report";
} else {
  refresh(); setInterval(refresh, 2000);
}
setInterval(tick, 1000);
