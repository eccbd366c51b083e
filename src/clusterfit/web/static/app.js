// clusterfit web page: vanilla JS over the JSON API of the same server (no CDN, no build step).
"use strict";

const $ = (id) => document.getElementById(id);
const DEFAULT_SYSTEMS = ["dgx_h100", "hgx_h200", "dgx_b200"];
const COLORS = ["#4c6ef5", "#e8590c", "#2f9e44", "#ae3ec9", "#1098ad", "#f59f00", "#d6336c", "#495057"];
const GB = 1e9;

const fmtGB = (b) => (b / GB).toFixed(b >= 100 * GB ? 0 : 1) + " GB";
const fmtInt = (n) => Math.round(n).toLocaleString("en-US");
const fmtMoney = (x) => (x === null || x === undefined) ? "n/a" : "$" + (x >= 100 ? fmtInt(x) : x.toFixed(2));
const fmtMs = (s) => (s * 1e3 >= 100 ? fmtInt(s * 1e3) : (s * 1e3).toFixed(1)) + " ms";
const fmtParams = (n) => n >= 1e12 ? (n / 1e12).toFixed(2) + "T" : n >= 1e9 ? (n / 1e9).toFixed(1) + "B" : (n / 1e6).toFixed(0) + "M";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v; else if (k === "text") node.textContent = v; else node.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

async function api(path, body, signal) {
  // POST (or GET without body) with up to 5 retries while the server answers 429 (busy)
  for (let attempt = 0; ; attempt++) {
    const resp = await fetch(path, body === undefined ? { signal } : {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body), signal });
    if (resp.status === 429 && attempt < 5) { await new Promise((r) => setTimeout(r, 250 * (attempt + 1))); continue; }
    const data = await resp.json().catch(() => ({ detail: `HTTP ${resp.status}` }));
    if (!resp.ok) throw new Error(data.detail || `HTTP ${resp.status}`);
    return data;
  }
}

// ------------------------------------------------------------------------------------------- inputs
const numberOf = (id) => { const v = $(id).value.trim(); return v === "" ? null : Number(v); };

let draftConfig = null;   // the EAGLE head's config.json, read in the browser (the server reads no file)

function customConfig() {
  // the pasted config.json as an object, null when empty; throws with a message when it is not JSON
  const text = $("config").value.trim();
  if (!text) return null;
  let cfg;
  try { cfg = JSON.parse(text); } catch (e) { throw new Error("config.json: " + e.message); }
  if (typeof cfg !== "object" || cfg === null || Array.isArray(cfg)) throw new Error("config.json must be a JSON object");
  return cfg;
}

function modelPart() {
  const out = { model: $("model").value.trim() };
  const cfg = customConfig();
  if (cfg) { out.config = cfg; if (!out.model || knownModels.has(out.model.toLowerCase())) out.model = "custom"; }
  return out;
}

function selectedSystems() {
  return [...document.querySelectorAll("#systems input:checked")].map((c) => c.value);
}

function fitRequest() {
  const req = { ...modelPart(), systems: selectedSystems(), engine: $("engine").value };
  if ($("precision").value) req.precision = $("precision").value;
  if ($("kv-dtype").value) req.kv_dtype = $("kv-dtype").value;
  const context = numberOf("context"); if (context !== null) req.context = context;
  const sessions = numberOf("sessions"); if (sessions !== null) req.sessions = sessions;
  return { ...req, ...speculativePart() };
}

// the drafter counts in the fit (its weights and KV layers) as in the plan
function speculativePart() {
  const drafts = numberOf("spec-k");
  if (drafts === null) return {};
  const part = { num_speculative_tokens: drafts, speculative_method: $("spec-method").value };
  const accept = numberOf("spec-accept"); if (accept !== null) part.speculative_acceptance = accept;
  if (draftConfig) part.speculative_draft_config = draftConfig;
  return part;
}

function planRequest() {
  const req = { ...modelPart(), systems: selectedSystems(), engine: $("engine").value,
                isl: numberOf("isl"), osl: numberOf("osl"), rate: numberOf("rate") };
  const ttft = numberOf("ttft"), tpot = numberOf("tpot");
  if (ttft !== null) req.ttft_ms = ttft;
  if (tpot !== null) req.tpot_ms = tpot;
  if ($("precision").value) req.precisions = [$("precision").value];
  if ($("kv-dtype").value) req.kv_dtypes = [$("kv-dtype").value];
  const pin = numberOf("ep-in"), pout = numberOf("ep-out");
  // both prices or neither: one left empty was sent as 0, judging against a free side
  if ((pin === null) !== (pout === null)) throw new Error("endpoint price: give both $ per million input and output tokens");
  if (pin !== null) req.endpoint_price = `in=${pin},out=${pout}`;
  return { ...req, ...speculativePart() };
}

// --------------------------------------------------------------------------------------------- fit
let fitTimer = null, fitSeq = 0, fitAbort = null;

function scheduleFit() {
  clearTimeout(fitTimer);
  $("fit-status").textContent = "updating...";
  fitTimer = setTimeout(runFit, 200);
}

async function runFit() {
  const seq = ++fitSeq;
  if (fitAbort) fitAbort.abort();
  fitAbort = new AbortController();
  $("config-error").textContent = "";
  let req;
  try { req = fitRequest(); } catch (e) { fitFailed("config-error", e.message); return; }
  if (!req.systems.length) { fitFailed("fit-error", "Choose at least one system."); return; }
  try {
    const res = await api("/api/fit", req, fitAbort.signal);
    if (seq !== fitSeq) return;
    $("fit-error").textContent = "";
    renderFit(res);
    $("fit-status").textContent = "";
  } catch (e) {
    if (e.name === "AbortError" || seq !== fitSeq) return;
    fitFailed("fit-error", e.message);
  }
}

// the form no longer gives a fit: the cards and the model facts of the last one would describe another question
function fitFailed(where, message) {
  $(where).textContent = message;
  $("fit-status").textContent = "";
  $("fit-cards").replaceChildren();
  $("model-facts").textContent = "";
}

function layoutText(l) {
  return ["tp", "pp", "ep", "dp"].filter((k) => k === "tp" || l[k] > 1).map((k) => k.toUpperCase() + l[k]).join(" ");
}

function shortName(r) {
  // "NVIDIA DGX H100 (8x H100 SXM5 80GB)" -> "8x H100 SXM5 80GB"
  const m = /\(([^)]*)\)/.exec(r.system_name);
  return m && /^\d+x /.test(m[1]) ? m[1] : r.system_name;
}

function verdict(r) {
  const name = shortName(r);
  if (!r.fits && r.sessions_fit) return { ok: false, text: `does not fit: ${r.sessions_fit.explanation}` };
  if (!r.fits) return { ok: false, text: `does not fit on ${name}: ${r.reason}` };
  if (r.nodes === 1) return { ok: true, text: `fits on one node (${r.gpus} GPUs, ${layoutText(r.layout)})` };
  return { ok: false, text: `does not fit on one ${name} node: needs ${r.nodes} nodes (${r.gpus} GPUs, ${layoutText(r.layout)})` };
}

// each engine's own name for its memory fraction (as clusterfit/report/engine_names.py): vLLM engine args,
// SGLang server args, the trtllm-serve flag deploy writes
const FRACTION_NAME = { vllm: "vLLM gpu_memory_utilization", sglang: "SGLang mem_fraction_static",
                        trtllm: "TensorRT-LLM free_gpu_memory_fraction" };

function memoryBar(r, engine) {
  const total = r.device_bytes_per_gpu;
  const reserve = r.reserve_bytes_per_gpu.total;
  const parts = [["weights", "weights", r.weight_bytes_per_gpu], ["reserve", "runtime reserve", reserve],
                 ["kv", "KV cache", Math.max(0, r.kv_budget_bytes_per_gpu)]];
  const used = parts.reduce((s, p) => s + p[2], 0);
  parts.push(["free", "free", Math.max(0, total - used)]);
  const scale = Math.max(total, used);
  const bar = el("div", { class: "bar", role: "img",
    "aria-label": `One GPU: ${parts.map((p) => `${p[1]} ${fmtGB(p[2])}`).join(", ")} of ${fmtGB(total)}` });
  for (const [cls, label, bytes] of parts) {
    const seg = el("span", { class: cls, title: `${label}: ${fmtGB(bytes)}` });
    seg.style.width = (100 * bytes / scale).toFixed(2) + "%";
    bar.append(seg);
  }
  const legend = el("div", { class: "legend",
    text: `per GPU of ${fmtGB(total)}: weights ${fmtGB(r.weight_bytes_per_gpu)}, reserve ${fmtGB(reserve)}, ` +
          `KV ${fmtGB(Math.max(0, r.kv_budget_bytes_per_gpu))}, free ${fmtGB(Math.max(0, total - used))}` +
          ` (${FRACTION_NAME[engine] || "engine memory fraction"} ${r.memory_fraction})` });
  return [bar, legend];
}

function fitCard(r, context, engine) {
  const v = verdict(r);
  const n = r.naive;
  const naiveText = n.fits ? `fits on one node, ${fmtGB(n.left_bytes)} left for KV`
                           : `needs ${n.nodes_needed} node${n.nodes_needed > 1 ? "s" : ""}`;
  const realText = r.nodes_needed ? `needs ${r.nodes_needed} node${r.nodes_needed > 1 ? "s" : ""}, ` +
                   `KV ${fmtGB(r.kv_budget_bytes_per_gpu)} per GPU` : "does not fit up to the search limit";
  const table = el("table", {},
    el("tr", {}, el("th", { text: "" }), el("th", { text: "naive (spreadsheet)" }), el("th", { text: "realistic" })),
    el("tr", {}, el("th", { text: "weights" }), el("td", { text: fmtGB(n.weight_bytes) }), el("td", { text: fmtGB(r.weight_bytes) })),
    el("tr", {}, el("th", { text: "answer" }), el("td", { text: naiveText }), el("td", { text: realText })));
  const sessions = el("p", {}, el("span", { class: "big sessions", "data-testid": "sessions", text: fmtInt(r.max_sequences) }),
    ` sessions of ${fmtInt(context)} tokens per replica (${fmtInt(r.max_kv_tokens)} KV tokens)`);
  const card = el("article", { class: "card", "data-system": r.system, "aria-label": r.system_name },
    el("h3", {}, shortName(r), el("small", { text: `${r.system} - ${r.system_name}` })),
    el("p", { class: "verdict " + (v.ok ? "ok" : "bad"), text: (v.ok ? "\u2713 " : "\u2717 ") + v.text }),
    ...memoryBar(r, engine), sessions, table);
  if (r.sessions_fit && r.fits) card.append(el("p", { class: "hint", text: r.sessions_fit.explanation }));
  for (const note of r.notes || []) card.append(el("p", { class: "hint", text: note }));
  return card;
}

function renderFit(res) {
  const m = res.model;
  $("model-facts").textContent = `${m.name}: ${fmtParams(m.total_params)} parameters (${fmtParams(m.active_params)} active), ` +
    `${res.precision}, KV ${m.kv_bytes_per_token !== undefined ? fmtInt(m.kv_bytes_per_token) + " bytes/token" : "n/a"} (${m.kv_dtype || ""}), ` +
    `${Object.entries(m.attention_kinds).map(([k, n]) => `${n} ${k}`).join(", ")} layers`;
  $("fit-cards").replaceChildren(...res.results.map((r) => fitCard(r, res.context, res.engine)));
}

// -------------------------------------------------------------------------------------------- plan
async function runPlan() {
  const button = $("plan-button");
  if (button.disabled) return;   // planning already (Enter in a field while it runs)
  $("plan-error").textContent = "";
  let req;
  try { req = planRequest(); } catch (e) { planFailed(e.message); return; }
  button.disabled = true;
  $("plan-status").textContent = "planning...";
  try {
    const res = await api("/api/plan", req);
    renderPlan(res);
    lastPlanRequest = req;   // Deploy deploys this question, not the form as edited since
    $("plan-status").textContent = `${fmtInt(res.configurations_evaluated)} configurations evaluated`;
  } catch (e) {
    planFailed(e.message);
  } finally {
    button.disabled = false;
  }
}

// the form's question has no plan: the last plan, its Pareto front and its Deployment section answered another
// question (Generate would deploy it), so they go
function planFailed(message) {
  $("plan-error").textContent = message;
  $("plan-status").textContent = "";
  $("plan-out").replaceChildren();
  renderPareto(null);
  lastPlan = lastPlanRequest = null;
  $("deploy").hidden = true;
  $("deploy-out").replaceChildren();
  $("deploy-error").textContent = "";
}

function figure(value, label) { return el("div", {}, el("b", { text: value }), el("span", { text: label })); }

function renderPlan(res) {
  const out = [];
  // one output token (the plan says so): it is sampled at the end of the prefill, no request decodes, no TPOT
  // (tpot_s and tokens_per_s_per_user are null then)
  const noDecode = res.one_output_token === true;
  const tpotText = (t) => (noDecode || t == null ? "-" : fmtMs(t));
  out.push(el("p", { class: "hint", text: `${res.model}: ${res.workload}; ${res.slo}` }));
  const r = res.recommended;
  if (r) {
    out.push(el("div", { class: "recommended", "data-testid": "recommended" },
      el("h3", { text: `Recommended: ${r.system} (${r.gpu}), ${r.layout}` +
        (r.prefill ? `; prefill ${r.prefill.layout}` : "") + `${r.xPyD ? " " + r.xPyD : ""}, ${r.mode}` }),
      el("div", { class: "figures" },
        r.prefill ? figure(`${fmtInt(r.prefill.replicas)} + ${fmtInt(r.replicas)}`, "prefill + decode replicas" +
          (r.spare_replicas ? ` (${r.spare_replicas} spare per pool)` : ""))
          : figure(fmtInt(r.replicas), "replicas" + (r.spare_replicas ? ` (${r.spare_replicas} spare)` : "")),
        figure(fmtInt(r.nodes), "nodes"), figure(fmtInt(r.total_gpus), "GPUs"),
        figure(fmtMoney(r.cost_per_hour), "per hour"), figure(fmtMoney(r.cost_per_mtok_out), "per Mtok out"),
        figure(fmtMs(r.ttft_s), "TTFT (predicted)"), figure(tpotText(r.tpot_s), "TPOT (predicted)"),
        figure(noDecode || r.tokens_per_s_per_user == null ? "-" : r.tokens_per_s_per_user.toFixed(0),
          "tokens/s per user")),
      el("p", { class: "hint", text: r.explanation || r.why })));
  } else {
    out.push(el("p", { class: "verdict bad", text: "No plan meets the targets." }));
    if (res.explanation) out.push(el("p", { text: res.explanation }));
    if (res.closest) out.push(el("p", { class: "hint", text: `Closest: ${res.closest.system} ${res.closest.layout}, missed ${res.closest.missed.join(", ")}` }));
  }
  const sp = res.speculative;
  if (sp) out.push(el("p", { class: "hint", "data-testid": "speculative", text: `Speculative decoding: ${sp.method}, ` +
    `${sp.draft_tokens} draft tokens per step at acceptance ${sp.acceptance.toFixed(2)} ` +
    `(${sp.tokens_per_step.toFixed(2)} tokens per step per sequence), the drafter costing ` +
    `${(100 * sp.draft_cost).toFixed(2)}% of a decode step per draft token, as the predicted TPOT assumes.` }));
  if (res.endpoint) out.push(el("p", { class: "endpoint", "data-testid": "endpoint" },
    el("b", { text: `Endpoint verdict: ${res.endpoint.verdict}. ` }), res.endpoint.explanation));
  if (res.per_system.length) {
    const head = el("tr", {}, ...["system", "layout", "replicas", "GPUs", "$/h, all replicas", "$/Mtok out", "TTFT", "TPOT"]
      .map((h, i) => el("th", { class: i > 1 ? "num" : null, scope: "col", text: h })));
    const rows = res.per_system.map((o) => el("tr", {},
      el("td", { text: o.system }), el("td", { text: o.layout + (o.xPyD ? " " + o.xPyD : "") }),
      el("td", { class: "num", text: fmtInt(o.replicas) }), el("td", { class: "num", text: fmtInt(o.total_gpus) }),
      el("td", { class: "num", text: fmtMoney(o.cost_per_hour) }), el("td", { class: "num", text: fmtMoney(o.cost_per_mtok_out) }),
      el("td", { class: "num", text: fmtMs(o.ttft_s) }), el("td", { class: "num", text: tpotText(o.tpot_s) })));
    out.push(el("table", { "aria-label": "Best plan per system" }, el("caption", { class: "hint", text: "Best plan per system" }), head, ...rows));
  }
  if (res.not_fitting.length) out.push(el("p", { class: "hint", text: "Does not fit: " + res.not_fitting.join("; ") }));
  if (res.no_plan && res.no_plan.length) out.push(el("p", { class: "hint", text: "No plan on " + res.no_plan.join("; ") }));
  $("plan-out").replaceChildren(...out);
  renderPareto(res.pareto);
  lastPlan = r || null;
  $("deploy").hidden = !r;
  $("deploy-out").replaceChildren();
}

// ---------------------------------------------------------------------------------- deployment
let lastPlan = null;
let lastPlanRequest = null;

async function runDeploy() {
  const button = $("deploy-button");
  if (!lastPlan || button.disabled) return;
  $("deploy-error").textContent = "";
  if (!lastPlanRequest) return;
  const req = { ...lastPlanRequest };
  req.systems = [lastPlan.system];
  req.target = $("deploy-target").value;
  delete req.endpoint_price;
  const draft = $("spec-draft").value.trim();
  if (draft) req.speculative_draft_model = draft;
  button.disabled = true;
  $("deploy-status").textContent = "generating...";
  const plan = lastPlan;
  try {
    const res = await api("/api/deploy", req);
    if (lastPlan !== plan) return;   // a Plan since answered another question (or none)
    // deployment files are aggregated replicas only: a disaggregated recommendation is deployed as the cheapest
    // aggregated plan, which the page says rather than letting the files stand for the plan shown
    const disagg = lastPlan.mode !== "aggregated" ? "Deployment files are written for aggregated replicas only; the " +
      "recommendation above is disaggregated, so these deploy the cheapest aggregated plan: " : "";
    const head = el("p", { class: "hint", "data-testid": "deploy-head", text: disagg +
      `${res.engine} ${res.engine_version} on ${res.plan.system}, ${res.plan.layout}, ` +
      `${fmtInt(res.plan.replicas)} replica(s); ${res.files.length} file(s)` });
    const files = res.files.map((f, i) => el("details", { open: i === 0 ? "" : null },
      el("summary", { text: `${f.path} (${f.role})` }), el("pre", { "data-testid": "deploy-file", text: f.text })));
    $("deploy-out").replaceChildren(head, ...files);
  } catch (e) {
    if (lastPlan === plan) $("deploy-error").textContent = e.message;
  } finally {
    $("deploy-status").textContent = "";
    button.disabled = false;
  }
}

// ---------------------------------------------------------------------------------- Pareto chart
const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function ticks(max) {
  const step0 = max / 5, mag = Math.pow(10, Math.floor(Math.log10(step0 || 1)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= step0) || mag;
  const out = []; for (let v = 0; v <= max * 1.0001; v += step) out.push(v); return out;
}

function renderPareto(pareto) {
  const series = Object.entries(pareto || {}).filter(([, pts]) => pts.length);
  $("pareto").hidden = !series.length;
  if (!series.length) return;
  const W = 640, H = 320, L = 60, R = 150, T = 10, B = 40;
  const xs = series.flatMap(([, p]) => p.map((q) => q.tokens_per_s_per_user));
  const ys = series.flatMap(([, p]) => p.map((q) => q.output_tokens_per_s_per_gpu));
  const xt = ticks(Math.max(...xs) * 1.05), yt = ticks(Math.max(...ys) * 1.05);
  const xmax = xt[xt.length - 1] || 1, ymax = yt[yt.length - 1] || 1;
  const X = (v) => L + (W - L - R) * v / xmax, Y = (v) => H - B - (H - T - B) * v / ymax;
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img",
    "aria-label": "Pareto front: output tokens/s per GPU against tokens/s per user, per system" });
  chart.append(svg("title", {}, "Pareto front per system"));
  for (const v of xt) {
    chart.append(svg("line", { x1: X(v), x2: X(v), y1: T, y2: H - B, stroke: "#eaeef2" }));
    chart.append(svg("text", { x: X(v), y: H - B + 14, "text-anchor": "middle" }, fmtInt(v)));
  }
  for (const v of yt) {
    chart.append(svg("line", { x1: L, x2: W - R, y1: Y(v), y2: Y(v), stroke: "#eaeef2" }));
    chart.append(svg("text", { x: L - 6, y: Y(v) + 4, "text-anchor": "end" }, fmtInt(v)));
  }
  chart.append(svg("text", { x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle" }, "tokens/s per user (speed)"));
  chart.append(svg("text", { x: 12, y: (T + H - B) / 2, "text-anchor": "middle", transform: `rotate(-90 12 ${(T + H - B) / 2})` }, "output tokens/s per GPU"));
  series.forEach(([name, pts], i) => {
    const color = COLORS[i % COLORS.length];
    const sorted = [...pts].sort((a, b) => a.tokens_per_s_per_user - b.tokens_per_s_per_user);
    chart.append(svg("polyline", { fill: "none", stroke: color, "stroke-width": 2,
      points: sorted.map((p) => `${X(p.tokens_per_s_per_user).toFixed(1)},${Y(p.output_tokens_per_s_per_gpu).toFixed(1)}`).join(" ") }));
    for (const p of sorted) {
      const dot = svg("circle", { cx: X(p.tokens_per_s_per_user), cy: Y(p.output_tokens_per_s_per_gpu), r: 3, fill: color });
      dot.append(svg("title", {}, `${name} ${p.layout} ${p.mode}, batch ${fmtInt(p.batch)}: ${p.tokens_per_s_per_user.toFixed(1)} tok/s/user, ${p.output_tokens_per_s_per_gpu.toFixed(0)} tok/s/GPU`));
      chart.append(dot);
    }
    chart.append(svg("rect", { x: W - R + 12, y: T + 6 + i * 18, width: 12, height: 12, fill: color }));
    chart.append(svg("text", { x: W - R + 30, y: T + 16 + i * 18 }, name));
  });
  $("pareto-chart").replaceChildren(chart);
}

// -------------------------------------------------------------------------------------------- setup
const knownModels = new Set();

async function loadLists() {
  const [models, systems] = await Promise.all([api("/api/models"), api("/api/systems")]);
  const list = $("model-list");
  for (const m of models.models) {
    knownModels.add(m.hf_id.toLowerCase());
    m.aliases.forEach((a) => knownModels.add(a.toLowerCase()));
    list.append(el("option", { value: m.hf_id, label: `${fmtParams(m.total_params)} (${fmtParams(m.active_params)} active)` }));
  }
  const box = $("systems");
  const preset = systems.systems.some((s) => DEFAULT_SYSTEMS.includes(s.id)) ? DEFAULT_SYSTEMS : systems.systems.slice(0, 3).map((s) => s.id);
  for (const s of systems.systems) {
    const id = "sys-" + s.id;
    const box1 = el("input", { type: "checkbox", id, value: s.id, checked: preset.includes(s.id) ? "checked" : null });
    box.append(el("label", { for: id }, box1, `${s.gpus_per_node}x ${s.gpu_name}`,
      el("small", { text: `${s.id}, ${s.hbm_gb_per_gpu} GB` })));
  }
}

// Enter in a field: Generate in the Deployment section, Plan among the traffic and targets, the fit (at once, not
// after the typing pause) elsewhere; a textarea takes it as a new line, a file field opens its picker
function onEnter(e) {
  if (e.key !== "Enter" || e.isComposing || e.altKey || e.ctrlKey || e.metaKey || e.shiftKey) return;
  const t = e.target;
  const field = t instanceof HTMLSelectElement ||
    (t instanceof HTMLInputElement && !["file", "button", "submit", "reset"].includes(t.type));
  if (!field) return;
  if (t.closest("#deploy")) runDeploy();
  else if (t.closest("#plan-fields")) runPlan();
  else { clearTimeout(fitTimer); runFit(); }
}

function setup() {
  const form = $("form");
  form.addEventListener("input", (e) => { if (!["isl", "osl", "rate", "ttft", "tpot", "ep-in", "ep-out", "spec-draft", "spec-draft-config"].includes(e.target.id)) scheduleFit(); });
  form.addEventListener("change", (e) => { if (e.target.id === "model") scheduleFit(); });
  form.addEventListener("submit", (e) => { e.preventDefault(); runPlan(); });
  // the buttons are type="button" (the fit runs as the form changes, so the form submits nothing), so a browser's
  // implicit submission never fires: Enter in a field runs its section's action itself
  form.addEventListener("keydown", onEnter);
  $("deploy").addEventListener("keydown", onEnter);
  $("plan-button").addEventListener("click", runPlan);
  $("deploy-button").addEventListener("click", runDeploy);
  $("config-file").addEventListener("change", async (e) => {
    const file = e.target.files[0];
    if (!file) return;
    if (file.size > 900000) { $("config-error").textContent = "config.json larger than 900 kB"; return; }
    $("config").value = await file.text();
    $("custom").open = true;
    scheduleFit();
  });
  $("spec-draft-config").addEventListener("change", async (e) => {
    const file = e.target.files[0];
    draftConfig = null;
    $("spec-draft-config-error").textContent = "";
    if (!file) { scheduleFit(); return; }
    try {
      if (file.size > 900000) throw new Error("larger than 900 kB");
      const cfg = JSON.parse(await file.text());
      if (typeof cfg !== "object" || cfg === null || Array.isArray(cfg)) throw new Error("not a JSON object");
      draftConfig = cfg;
    } catch (err) { $("spec-draft-config-error").textContent = `${file.name}: ${err.message}`; }
    scheduleFit();
  });
  loadLists().then(scheduleFit, (e) => { $("fit-error").textContent = "Could not load the model and system lists: " + e.message; });
}

document.addEventListener("DOMContentLoaded", setup);
