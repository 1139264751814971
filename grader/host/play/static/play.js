// The playground's page: asks the server (grader/host/play/app.py) and draws its answers. No library, no network
// beyond 127.0.0.1: the page works offline.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { answer: null, busy: {} };
const RANDOM_NOTE = "Offline: the reference has random weights, not GPT-2's: its numbers mean nothing, " +
  "only whether yours match them.";

function element(tag, text, className) {
  const made = document.createElement(tag);
  if (text !== undefined && text !== null) made.textContent = String(text);
  if (className) made.className = className;
  return made;
}

function row(cells, header) {
  const tr = element("tr");
  for (const cell of cells) {
    if (cell instanceof HTMLTableCellElement) {
      tr.append(cell);
      continue;
    }
    const td = element(header ? "th" : "td");
    td.append(cell instanceof Node ? cell : String(cell));
    tr.append(td);
  }
  return tr;
}

function token(text) {
  return element("span", JSON.stringify(text).slice(1, -1), "token");
}

// A number to `digits`; the server sends a NaN or an infinity as its word ("nan", "inf"), and nothing as null.
function fixed(value, digits) {
  if (typeof value === "string") return value;
  return typeof value === "number" ? value.toFixed(digits) : "-";
}

// A difference: float rounding (1e-7) stays visible as what it is, not as 0.0000.
function difference(value) {
  return typeof value === "number" && value !== 0 && Math.abs(value) < 1e-3 ? value.toExponential(1) : fixed(value, 4);
}

async function post(url, body) {
  try {
    const reply = await fetch(url, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
    return await reply.json();
  } catch (failed) {
    return { error: { file: null, line: null, message: `the playground's server does not answer (${failed})` } };
  }
}

function showError(error) {
  const banner = $("error");
  banner.hidden = !error;
  if (!error) return;
  const place = error.file ? `${error.file}${error.line ? ":" + error.line : ""}: ` : "";
  banner.textContent = place + error.message;
}

function showReference(reference) {
  const random = reference === "random";
  for (const name of document.querySelectorAll(".ref-name")) name.textContent = random ? "the random reference" : "GPT-2";
  $("model-note").hidden = !random;
  $("model-note").textContent = random ? RANDOM_NOTE : "";
}

function showStandIns(standIns) {
  const note = $("stand-ins");
  note.hidden = !standIns || standIns.length === 0;
  if (note.hidden) return;
  const listed = standIns.map((s) => `${s.module} (${s.why})`).join("; ");
  note.textContent = `Stand-ins: the grader's own modules run in place of these of yours: ${listed}.`;
}

async function busy(name, statusId, work) {
  if (state.busy[name]) return;
  state.busy[name] = true;
  $(statusId).textContent = "working...";
  try {
    await work();
  } finally {
    state.busy[name] = false;
    $(statusId).textContent = "";
  }
}

async function read(event) {
  event.preventDefault();
  await busy("read", "read-status", async () => {
    const answer = await post("/api/analyse", { text: $("text").value });
    showError(answer.error);
    if (answer.reference) showReference(answer.reference);
    showStandIns(answer.stand_ins);
    state.answer = answer;
    showNext(answer.next);
    showInside(answer);
    showWhere(answer.where, answer.stand_ins || []);
    showFirstDifference(answer.first_difference, answer.where);
  });
}

function topTable(table, entries, other) {
  table.replaceChildren(row(["#", "token", "p"], true));
  const theirs = new Set((other || []).map((e) => e.token));
  (entries || []).forEach((entry, i) => {
    const tr = row([i + 1, token(entry.token), fixed(entry.p, 4)]);
    tr.className = theirs.has(entry.token) ? "same" : "differs";
    table.append(tr);
  });
}

function showNext(next) {
  topTable($("next-yours"), next && next.yours, next && next.gpt2);
  topTable($("next-gpt2"), next && next.gpt2, next && next.yours);
  $("next-diff").textContent = next
    ? `largest |yours - ${refName()}| logit: ${difference(next.max_logit_diff)}` : "";
}

function refName() {
  return document.querySelector(".ref-name").textContent;
}

function options(select, count, prefix) {
  const kept = select.value;
  select.replaceChildren(...Array.from({ length: count }, (_, i) => {
    const option = element("option", `${prefix} ${i}`);
    option.value = String(i);
    return option;
  }));
  if (kept !== "" && Number(kept) < count) select.value = kept;
}

// Either model's side of `inside` may be null (yours, where your model did not answer): the other is still shown.
function either(pair) {
  return pair && (pair.yours || pair.gpt2);
}

function showInside(answer) {
  const inside = answer.inside;
  const patterns = either(inside && inside.patterns) || [];
  options($("layer"), patterns.length, "layer");
  options($("head"), patterns.length ? patterns[0].length : 0, "head");
  drawPatterns();
  showLens(inside && inside.logit_lens, answer.tokens || []);
  showScores($("induction"), inside && inside.induction);
  showScores($("previous"), inside && inside.previous_token);
}

function drawPatterns() {
  const answer = state.answer;
  const inside = answer && answer.inside;
  const canvases = ["pattern-yours", "pattern-gpt2", "pattern-diff"].map($);
  for (const canvas of canvases) canvas.width = canvas.height = 0;
  if (!inside || $("layer").value === "") return;
  const [layer, head] = [Number($("layer").value), Number($("head").value)];
  const pick = (side) => (side ? side[layer][head] : null);
  const yours = pick(inside.patterns.yours);
  const theirs = pick(inside.patterns.gpt2);
  const where = `layer ${layer}, head ${head}`;
  if (yours) heatmap(canvases[0], yours, answer.tokens, blue, `your attention pattern, ${where}`);
  if (theirs) heatmap(canvases[1], theirs, answer.tokens, blue, `${refName()}'s attention pattern, ${where}`);
  if (!yours || !theirs) return;
  const diff = yours.map((r, q) => r.map((v, k) => v - theirs[q][k]));
  const scale = Math.max(0.05, ...diff.flat().map(Math.abs));
  heatmap(canvases[2], diff, answer.tokens, (v) => redBlue(v / scale),
    `the difference, ${where}: largest ${scale.toFixed(3)}`);
}

function blue(v) {
  const shade = Math.round(255 * (1 - Math.min(1, Math.max(0, v))));
  return `rgb(${shade},${shade},255)`;
}

function redBlue(v) {
  const shade = Math.round(255 * (1 - Math.min(1, Math.abs(v))));
  return v >= 0 ? `rgb(255,${shade},${shade})` : `rgb(${shade},${shade},255)`;
}

function heatmap(canvas, values, tokens, colour, label) {
  const n = values.length;
  const cell = Math.max(8, Math.min(28, Math.floor(360 / Math.max(1, n))));
  const margin = 80;
  canvas.width = canvas.height = margin + cell * n;
  canvas.setAttribute("aria-label", label);
  const draw = canvas.getContext("2d");
  draw.fillStyle = "white";
  draw.fillRect(0, 0, canvas.width, canvas.height);
  values.forEach((r, q) => r.forEach((v, k) => {
    draw.fillStyle = colour(v);
    draw.fillRect(margin + k * cell, margin + q * cell, cell, cell);
  }));
  draw.fillStyle = "black";
  draw.font = `${Math.min(12, cell)}px monospace`;
  const short = (t) => (t.length > 9 ? t.slice(0, 8) + "…" : t);
  tokens.forEach((t, i) => {
    draw.textAlign = "right";
    draw.fillText(short(t), margin - 4, margin + i * cell + cell * 0.75);
    draw.save();
    draw.translate(margin + i * cell + cell * 0.75, margin - 4);
    draw.rotate(-Math.PI / 2);
    draw.textAlign = "left";
    draw.fillText(short(t), 0, 0);
    draw.restore();
  });
}

function showLens(lens, tokens) {
  const table = $("lens");
  table.replaceChildren();
  const layers = either(lens);
  if (!layers) return;
  const at = (side, l, p) => (side && side[l] ? side[l][p] : null);
  table.append(row(["layer", ...tokens.map(token)], true));
  layers.forEach((layer, l) => {
    const cells = layer.map((_, p) => {
      const [mine, theirs] = [at(lens.yours, l, p), at(lens.gpt2, l, p)];
      const td = element("td");
      td.append(mine ? token(mine.token) : "-", " / ", theirs ? token(theirs.token) : "-");
      td.className = mine && theirs && mine.token === theirs.token ? "same" : "differs";
      td.title = `p ${fixed(mine && mine.p, 3)} / ${fixed(theirs && theirs.p, 3)}`;
      return td;
    });
    table.append(row([l, ...cells]));
  });
}

function showScores(table, scores) {
  table.replaceChildren();
  const layers = either(scores);
  if (!layers) return;
  const at = (side, l, h) => fixed(side ? side[l][h] : null, 2);
  table.append(row(["layer", ...layers[0].map((_, h) => `head ${h}`)], true));
  layers.forEach((layer, l) => {
    table.append(row([l, ...layer.map((_, h) => `${at(scores.yours, l, h)} / ${at(scores.gpt2, l, h)}`)]));
  });
}

function showWhere(where, standIns) {
  const table = $("where-table");
  table.replaceChildren();
  if (!where || where.length === 0) return;
  const stoodIn = new Set(standIns.map((s) => s.module));
  table.append(row(["module", "max |diff|", "first step that differs", "most likely", "what it says"], true));
  for (const module of where) {
    const name = element("td", module.module);
    if (stoodIn.has(module.module)) {
      name.append(" ", element("span", "(stand-in)", "stand-in"));
    }
    const tr = row([name, difference(module.max_diff), module.first_step || "-", module.mistake || "-", module.message]);
    const differs = module.status ? module.status !== "pass" : module.first_step || module.mistake;
    tr.className = differs ? "differs" : "";
    table.append(tr);
  }
}

function showFirstDifference(first, where) {
  const said = $("where-first");
  if (first) {
    said.textContent = `The first module that differs: ${first.module}` + (first.step ? `, from step ${first.step} on.` : ".");
  } else {
    said.textContent = where && where.length ? `Every module matches ${refName()} on this text.` : "";
  }
}

function generateBody() {
  const number = (id, parse) => {
    const value = $(id).value.trim();
    return value === "" ? null : parse(value);
  };
  return {
    text: $("text").value,
    greedy: $("greedy").checked,
    temperature: number("temperature", parseFloat),
    top_k: number("top_k", (v) => parseInt(v, 10)),
    top_p: number("top_p", parseFloat),
    frequency_penalty: number("frequency_penalty", parseFloat),
    seed: number("seed", (v) => parseInt(v, 10)),
    max_new_tokens: number("max_new_tokens", (v) => parseInt(v, 10)),
  };
}

function perToken(ms) {
  return typeof ms === "number" ? `${ms.toFixed(1)} ms per token` : "";
}

function yoursTime(yours) {
  const plain = perToken(yours.ms_per_token);
  const sampler = yours.sampler_stood_in ? " (stand-in: the grader's TransformerSampler, yours is not written yet)" : "";
  if (!yours.kv_cache) return `${plain} (no KV cache of yours yet: kv_cache.py)${sampler}`;
  return `${plain} without the KV cache; ${perToken(yours.ms_per_token_cached)} with yours${sampler}`;
}

async function generate(event) {
  event.preventDefault();
  await busy("generate", "generate-status", async () => {
    const body = generateBody();
    for (const key of ["temperature", "frequency_penalty", "seed", "max_new_tokens"]) {
      if (body[key] === null) delete body[key];
    }
    const answer = await post("/api/generate", body);
    showError(answer.error);
    const yours = answer.yours;
    const theirs = answer.gpt2;
    $("gen-yours").textContent = yours ? yours.text : "";
    $("gen-yours-time").textContent = yours ? yoursTime(yours) : "";
    $("gen-gpt2").textContent = theirs ? theirs.text : "";
    $("gen-gpt2-time").textContent = theirs ? perToken(theirs.ms_per_token) : "";
  });
}

function submitOnEnter(event) {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("read-form").requestSubmit();
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("read-form").addEventListener("submit", read);
  $("generate-form").addEventListener("submit", generate);
  $("text").addEventListener("keydown", submitOnEnter);
  $("layer").addEventListener("change", drawPatterns);
  $("head").addEventListener("change", drawPatterns);
});
