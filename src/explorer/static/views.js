// The page: what the model of model.js computes for the user's text, drawn as six views.
"use strict";

const payload = JSON.parse(document.getElementById("payload").textContent);
const model = loadModel(payload);
const T_MAX = model.config.context_window;
const index = new Map(model.vocab.map((ch, i) => [ch, i]));
const $ = (id) => document.getElementById(id);

/** How a character is shown: whitespace made visible. */
function glyph(ch) {
  return { "\n": "⏎", " ": "␣", "\t": "⇥", "\r": "␍" }[ch] ?? ch;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "style") node.style.cssText = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

const fmt = (x, digits = 3) => (x === -Infinity ? "−∞" : Number.isFinite(x) ? x.toFixed(digits) : String(x));

// ---------------------------------------------------------------- the analysis of a text

/** The model's view of a text: characters outside the vocabulary are skipped (and reported),
 *  the rest cropped to the last context_window characters, as the notes crop it.
 *  The whole text is only counted; the window is read backwards from its end, so that the work
 *  after a keystroke does not grow with the text (the model reads only the window). */
function windowOf(text) {
  let knownTotal = 0;
  const unknown = new Set();
  for (const ch of text) { // code points: an emoji is one character, as in Python
    if (index.has(ch)) knownTotal++;
    else unknown.add(ch);
  }
  const tail = []; // the window's characters and the unknown ones among them, last first
  let known = 0, skippedInTail = 0;
  for (let k = text.length; k > 0 && known < T_MAX; ) {
    let start = k - 1;
    const low = text.charCodeAt(start);
    if (low >= 0xdc00 && low <= 0xdfff && start > 0 && (text.charCodeAt(start - 1) & 0xfc00) === 0xd800) start--;
    const ch = text.slice(start, k);
    k = start;
    if (index.has(ch)) { known++; tail.push(ch); }
    else if (skippedInTail++ < T_MAX) tail.push(ch);
  }
  tail.reverse();
  const seen = tail.filter((ch) => index.has(ch));
  return { tail, unknown: [...unknown], window: seen, ids: seen.map((ch) => index.get(ch)), cropped: knownTotal - seen.length };
}

/** The forward pass over a text's window, with the last position's distribution and logit lens.
 *  Given the previous analysis of the same window (an edit before the window, a character outside the
 *  vocabulary typed), its forward pass is reused: what the model reads did not change. */
function analyse(text, previous = null) {
  const view = windowOf(text);
  const T = view.ids.length;
  if (T === 0) return { ...view, T, result: null };
  if (previous && previous.result && previous.T === T && view.ids.every((id, t) => id === previous.ids[t])) return { ...previous, ...view };
  const result = forward(model, view.ids);
  const V = model.vocabSize;
  const logits = Float64Array.from(row(result.logits, T - 1, V));
  return { ...view, T, result, logits, probs: softmax(logits), lens: logitLens(model, result, T) };
}

// ---------------------------------------------------------------- state

const state = {
  text: payload.prompt,
  layer: 0,
  head: 0,
  query: null, // the position whose attention (and embedding, block, Q/K/V) is shown; null = the last one
  key: null, // the key of the Q, K, V view; null = the one the query weighs most
  pinned: false,
  temperature: 1.0,
  topK: null,
  topP: null,
  written: [], // characters added by "Write step by step", for "step back"
  picked: null, // what the last step wrote, and how: shown until the text is typed
  playing: null,
  allKeys: false, // the attention tables: every key in position order, not the heaviest first
};
let current = null;

/** follow: keep the end of the text in sight (the text box scrolls to what was just written). */
function setText(text, follow = false) {
  state.text = text;
  const box = $("prompt");
  if (box.value !== text) box.value = text;
  if (follow) box.scrollTop = box.scrollHeight;
  update();
}

let updated = null; // the update typing asked for, until it has run: what `settled` waits for

/** Typing asks for an update at the next frame (requestAnimationFrame), so that the typed character
 *  and the views it changes are painted in one frame: after a timer, the browser would paint the
 *  character first, a frame (~20 ms at 20,000 characters) the views wait for. Keystrokes that arrive
 *  before that frame, or while a large model computes (the nanogpt_gpu preset takes a second a pass),
 *  are answered by one update, not one each. A hidden page draws no frames: a timer runs it there. */
function scheduleUpdate() {
  if (updated) return;
  updated = new Promise((resolve) => {
    const run = () => {
      updated = null;
      try { update(); } finally { resolve(); }
    };
    if (document.hidden) setTimeout(run, 0);
    else requestAnimationFrame(run);
  });
}

function update() {
  const start = performance.now();
  const previous = current, query = state.query;
  current = analyse(state.text, previous);
  if (!state.pinned || state.query === null || state.query >= current.T) state.query = null;
  drawWindow();
  drawDistribution();
  drawPicked();
  drawButtons();
  if (!previous || current.result !== previous.result || state.query !== query) {
    // the views of the model's numbers; those below the fold are drawn when scrolled to
    drawSelection();
    request("lens-section", "ablate-section");
    if (headsNow && state.frame === headFrames().length - 1) request("job-section"); // its map on your text
  }
  $("timing").textContent = `the views in sight drawn in ${(performance.now() - start).toFixed(0)} ms (the sums in ${kernelName()}; the others when scrolled to)`;
}

// ---------------------------------------------------------------- views drawn when seen

/** A keystroke draws the views in sight at once; a view below the fold is only marked stale (its
 *  section gets data-stale) and is drawn from the state of that moment when any of it scrolls into
 *  the viewport (an IntersectionObserver reports it), once: a view whose inputs did not change since
 *  it was drawn is not drawn again, however often it is scrolled past. Until the observer's first
 *  report every view counts as in sight, so the page opens with every view drawn. */
const VIEWS = {
  "embed-section": () => drawInsideView(["embed-picker", "embed"], () => { positionPicker($("embed-picker")); drawEmbedding(); }),
  "block-section": () => drawInsideView(["flow-picker", "flow"], () => { positionPicker($("flow-picker")); drawFlow(); }),
  "attention-section": () => drawAttention(),
  "heads-section": () => drawInsideView(["heads-side"], drawHeadsSide),
  "qkv-section": () => drawInsideView(["qkv"], drawQKV),
  "lens-section": () => drawLens(),
  "job-section": () => drawHeadJob(),
  "circuits-section": () => drawCircuits(),
  "ablate-section": () => drawAblation(),
};
const inSight = new Set(Object.keys(VIEWS));

/** Draw the views of these sections now if in sight, else when they come into sight. */
function request(...sections) {
  for (const id of sections) {
    if (inSight.has(id)) drawView(id);
    else $(id).setAttribute("data-stale", "");
  }
}

function drawView(id) {
  $(id).removeAttribute("data-stale");
  VIEWS[id]();
}

function watchSight() {
  const observer = new IntersectionObserver((entries) => {
    for (const entry of entries) {
      const id = entry.target.id;
      if (!entry.isIntersecting) inSight.delete(id);
      else {
        inSight.add(id);
        if (entry.target.hasAttribute("data-stale")) drawView(id);
      }
    }
  });
  for (const id of Object.keys(VIEWS)) observer.observe($(id));
}

// ---------------------------------------------------------------- your text and its window

/** The window as the model reads it (only the window: the strip keeps its size whatever the text's
 *  length); what "Write step by step" added is marked apart from what was typed. */
function drawWindow() {
  const { tail, unknown, cropped, T } = current;
  const box = $("window-view");
  const spans = [];
  if (cropped) spans.push(el("span", { class: "ch outside" }, `… ${cropped.toLocaleString("en-US")} earlier character${cropped > 1 ? "s" : ""} outside the window`));
  const firstWritten = T - Math.min(state.written.length, T);
  let t = 0;
  for (const ch of tail) {
    if (!index.has(ch)) {
      spans.push(el("span", { class: "ch unknown", title: "not in the vocabulary: skipped" }, glyph(ch)));
      continue;
    }
    const written = t++ >= firstWritten;
    spans.push(el("span", { class: written ? "ch seen written" : "ch seen", title: written ? "written by the model" : "typed" }, glyph(ch)));
  }
  box.replaceChildren(...spans);
  // its end in sight, at the next frame: read now, scrollHeight would lay the page out in the middle of the update
  requestAnimationFrame(() => { box.scrollTop = box.scrollHeight; });
  const notes = [`the model sees the last ${T} of at most ${T_MAX} characters` + (state.written.length ? " (green: written by the model)" : "")];
  if (unknown.length) notes.push(`not in the vocabulary, so skipped: ${unknown.map((c) => JSON.stringify(c)).join(" ")}`);
  $("window-note").textContent = notes.join("; ");
  $("window-note").classList.toggle("warn", unknown.length > 0);
}

// ---------------------------------------------------------------- next character

function filtered() {
  return nextTokenDistribution(current.logits, state.temperature, state.topK, state.topP);
}

/** The bars: the characters in the model's order of likelihood, whatever the filters cut, so that
 *  a cut character keeps its place and its grey bar (after temperature, before top-k and top-p). */
function drawDistribution() {
  const bars = $("bars");
  bars.replaceChildren();
  if (!current.result) {
    bars.append(el("p", { class: "hint" }, "Type at least one character of the vocabulary: the model predicts what follows it."));
    return;
  }
  const probs = filtered();
  const grey = state.temperature === 0 ? probs : nextTokenDistribution(current.logits, state.temperature);
  const order = [...probs.keys()].sort((a, b) => current.logits[b] - current.logits[a]);
  const top = order.slice(0, 20);
  const rest = order.slice(20).reduce((sum, i) => sum + probs[i], 0);
  const restGrey = order.slice(20).reduce((sum, i) => sum + grey[i], 0);
  const max = Math.max(...top.map((i) => Math.max(probs[i], grey[i])), rest, restGrey);
  const rowOf = (label, p, raw, cls, title) =>
    el(
      "div",
      { class: "bar-row " + cls, title },
      el("span", { class: "bar-label" }, label),
      el("span", { class: "bar-track" }, el("span", { class: "bar-raw", style: `width:${(100 * raw) / max}%` }), el("span", { class: "bar", style: `width:${(100 * p) / max}%` })),
      el("span", { class: "bar-value" }, (100 * p).toFixed(1) + "%")
    );
  for (const i of top) {
    const cut = probs[i] === 0 && grey[i] > 0;
    const before = `${(100 * grey[i]).toFixed(1)}% before top-k and top-p`;
    bars.append(rowOf(glyph(model.vocab[i]), probs[i], grey[i], cut ? "cut" : "", cut ? `cut by the filters (${before})` : before));
  }
  if (order.length > 20) bars.append(rowOf(`${order.length - 20} others`, rest, restGrey, "rest", "the remaining characters together"));
  performance.mark("distribution-drawn");
}

// ---------------------------------------------------------------- write step by step

function write(greedy) {
  if (!current.result) return;
  const probs = filtered();
  const next = greedy ? argmax(current.logits) : sampleFrom(probs);
  const ch = model.vocab[next];
  state.picked = greedy
    ? `argmax wrote ${JSON.stringify(ch)}: the most likely character, p = ${(100 * current.probs[next]).toFixed(1)}%`
    : `sampled ${JSON.stringify(ch)}: it had p = ${(100 * probs[next]).toFixed(1)}% in the filtered distribution (${(100 * current.probs[next]).toFixed(1)}% before temperature, top-k and top-p)`;
  state.written.push(ch);
  setText(state.text + ch, true);
}

function stepBack() {
  if (!state.written.length) return;
  const last = state.written.pop();
  state.picked = `stepped back: removed ${JSON.stringify(last)}`;
  if (state.text.endsWith(last)) setText(state.text.slice(0, state.text.length - last.length), true);
}

function drawPicked() {
  $("picked").textContent = state.picked ?? "";
}

/** A button that can do nothing now is disabled: nothing to predict from, nothing written to take back. */
function drawButtons() {
  for (const id of ["sample", "argmax"]) $(id).disabled = !current.result;
  $("play").disabled = !current.result && !state.playing;
  $("back").disabled = state.written.length === 0;
}

function togglePlay() {
  if (state.playing) {
    clearInterval(state.playing);
    state.playing = null;
  } else state.playing = setInterval(() => write(false), 120);
  $("play").textContent = state.playing ? "❚❚ pause" : "▶ play";
  drawButtons();
}

// ---------------------------------------------------------------- attention

function selectedHead() {
  return current.result.attention[state.layer].heads[state.head];
}

function queryIndex() {
  return state.query ?? current.T - 1;
}

/** 0 -> white, 1 -> deep blue, as [r, g, b]. */
function heatRGB(w) {
  return [Math.round(255 - 215 * w), Math.round(255 - 175 * w), Math.round(255 - 60 * w)];
}

function heat(w) {
  return `rgb(${heatRGB(w).join(",")})`;
}

/** The text colour that reads on a background [r, g, b]: white or black, whichever contrasts more;
 *  one of the two always reaches WCAG's 4.5:1 (a softer ink fails on the mid blues). */
function inkOn(rgb) {
  const lin = (c) => ((c /= 255) <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4);
  const L = 0.2126 * lin(rgb[0]) + 0.7152 * lin(rgb[1]) + 0.0722 * lin(rgb[2]);
  return 1.05 / (L + 0.05) > (L + 0.05) / 0.05 ? "#fff" : "#000";
}

/** A colour scale under a view: a gradient from `from` to `to` with its two ends named, and extra swatches. */
function legend(id, colours, from, to, swatches = []) {
  const box = $(id);
  box.replaceChildren(
    el("span", {}, from),
    el("span", { class: "legend-bar", style: `background:linear-gradient(to right, ${colours.join(", ")})` }),
    el("span", {}, to),
    ...swatches.map(([style, label]) => el("span", { class: "legend-swatch-box" }, el("span", { class: "legend-swatch", style }), label))
  );
}

const MASKED_RGB = [242, 243, 245]; // the future: no weight at all, drawn apart from a weight of 0
/** model.attention_window w (null: every earlier key): query i sees keys i-w+1 .. i, the rest masked. */
const W_ATT = model.config.attention_window || null;
const firstKey = (i) => (W_ATT ? Math.max(0, i - W_ATT + 1) : 0);
const isMasked = (i, j) => j > i || j < firstKey(i);
const maskWords = W_ATT ? `−∞ above the diagonal and before the window: query i sees keys i−${W_ATT - 1}..i, w = ${W_ATT}` : "−∞ above the diagonal";

/** A T x T attention map as pixels on its own canvas: one putImageData, however large T is. */
function heatCanvas(weights, T) {
  const canvas = document.createElement("canvas");
  canvas.width = canvas.height = T;
  const ctx = canvas.getContext("2d");
  const image = ctx.createImageData(T, T);
  for (let a = 0; a < T; a++)
    for (let b = 0; b < T; b++) {
      const [r, g, bl] = isMasked(a, b) ? MASKED_RGB : heatRGB(weights[a * T + b]);
      image.data.set([r, g, bl, 255], 4 * (a * T + b));
    }
  ctx.putImageData(image, 0, 0);
  return canvas;
}

function drawAttention() {
  const strip = $("att-text"), steps = $("att-steps");
  strip.replaceChildren();
  steps.replaceChildren();
  $("att-map").hidden = !current.result;
  if (!current.result) {
    $("att-heads").replaceChildren();
    $("att-caption").textContent = "no character of the vocabulary in the text: nothing to attend to";
    return;
  }
  state.layer = Math.min(state.layer, current.result.attention.length - 1);
  drawHeadPicker();
  const { T, window: seen } = current;
  const { weights } = selectedHead();
  const i = queryIndex();
  seen.forEach((ch, j) => {
    const w = isMasked(i, j) ? 0 : weights[i * T + j];
    strip.append(
      el(
        "span",
        {
          class: "ch att" + (j === i ? " query" : "") + (isMasked(i, j) ? " future" : ""),
          style: isMasked(i, j) ? "" : `background:${heat(w)}`,
          title: j > i ? "the future: masked" : j < firstKey(i) ? `outside the window (${W_ATT}): masked` : `weight ${fmt(w)}`,
          onmouseenter: () => {
            if (state.pinned || queryIndex() === j) return; // the redrawn character under the mouse: nothing new
            state.query = j;
            drawSelection();
          },
          onclick: () => { state.pinned = !(state.pinned && state.query === j); state.query = j; drawSelection(); },
        },
        glyph(ch)
      )
    );
  });
  $("att-caption").textContent = `layer ${state.layer}, head ${state.head}: the weights that position ${i} (${JSON.stringify(seen[i])}) puts on each earlier character` + (W_ATT ? ` of the window, keys ${firstKey(i)}..${i}` : "") + (state.pinned ? " (pinned: click it again to follow the mouse)" : " (hover a character; click to pin)");
  drawMap($("att-map"), weights, T, i, seen);
  drawSteps(steps, i);
}

function drawHeadPicker() {
  const picker = $("att-heads");
  picker.replaceChildren();
  const { T } = current;
  current.result.attention.forEach((att, l) => {
    const rowBox = el("div", { class: "head-row" }, el("span", { class: "head-label" }, `layer ${l}`));
    att.heads.forEach((head, h) => {
      const canvas = heatCanvas(head.weights, T); // shown 48 px wide, pixels kept sharp
      canvas.className = "thumb" + (l === state.layer && h === state.head ? " selected" : "");
      canvas.title = `layer ${l}, head ${h}`;
      canvas.addEventListener("click", () => { state.layer = l; state.head = h; state.key = null; drawSelection(); });
      rowBox.append(el("span", { class: "thumb-box" }, canvas, el("small", {}, `h${h}`)));
    });
    picker.append(rowBox);
  });
}

/** The T x T map: row i holds the weights of query i; above the diagonal the future, masked: empty. */
function drawMap(canvas, weights, T, query, chars, width = mapWidth()) {
  const label = 14, size = Math.max(2, Math.min(36, Math.floor((width - label) / T)));
  canvas.width = canvas.height = label + T * size;
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  ctx.imageSmoothingEnabled = false; // one cell per weight, sharp
  ctx.drawImage(heatCanvas(weights, T), label, label, T * size, T * size);
  if (size >= 8) {
    ctx.font = `${Math.min(12, size)}px ui-monospace, monospace`;
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    ctx.fillStyle = "#555";
    for (let a = 0; a < T; a++) {
      ctx.fillText(glyph(chars[a]), label / 2, label + a * size + size / 2);
      ctx.fillText(glyph(chars[a]), label + a * size + size / 2, label / 2);
    }
  }
  if (query === null) return;
  ctx.strokeStyle = "#d33";
  ctx.lineWidth = 2;
  ctx.strokeRect(label + 1, label + query * size + 1, T * size - 2, size - 2);
}

/** The map's width: 560 px, or the attention card's width on a narrow screen. The card's width is
 *  kept by a ResizeObserver (after each layout), not read from the layout when a keystroke asks for
 *  it: the read forced the page's layout in the middle of the update (~6 ms of a keystroke). */
let attentionWidth = null;
function mapWidth() {
  if (attentionWidth === null) {
    attentionWidth = $("attention-section").clientWidth;
    new ResizeObserver(() => { attentionWidth = $("attention-section").clientWidth; }).observe($("attention-section"));
  }
  return Math.min(574, attentionWidth - 34);
}

/** The keys a table lists: the heaviest first (those above SHOWN_KEYS' weight, at most SHOWN_KEYS), or every
 * key in position order when state.allKeys; and a button that switches between the two. */
const SHOWN_KEYS = 8;
function keyOrder(keys, weightOf) {
  if (state.allKeys) return { shown: keys, rest: [] };
  const sorted = [...keys].sort((a, b) => weightOf(b) - weightOf(a) || a - b);
  return { shown: sorted.slice(0, SHOWN_KEYS), rest: sorted.slice(SHOWN_KEYS) };
}
function keysButton(total) {
  const label = state.allKeys ? "the heaviest keys first" : `all ${total} keys, in position order`;
  return el("button", { class: "keys-toggle", onclick: () => { state.allKeys = !state.allKeys; request("attention-section", "heads-section"); } }, label);
}

/** The notes' steps for one head and one query, with the actual numbers: the keys it weighs most first. */
function drawSteps(box, i) {
  const att = current.result.attention[state.layer];
  const { scores, weights, context } = selectedHead();
  const { T, window: seen } = current;
  const dK = att.dK;
  box.append(el("p", { class: "formula" }, `scores = Q Kᵀ / √d_k  (d_k = ${dK}),   + M (${maskWords}),   weights = softmax,   context = weights · V`));
  const table = el("table", { class: "steps" });
  table.append(el("tr", {}, ...["j", "char", "q·k_j / √d_k", "+ mask", "softmax", "weight × v_j"].map((h) => el("th", {}, h))));
  const V = att.V, d = model.d, offset = state.head * dK;
  const row = (j) => {
    const w = weights[i * T + j];
    const part = Float64Array.from({ length: dK }, (_, c) => w * V[j * d + offset + c]);
    return el("tr", { class: j === i ? "query-row" : "" }, el("td", {}, String(j)), el("td", { class: "mono" }, glyph(seen[j])),
      el("td", {}, fmt(scores[i * T + j])), el("td", {}, fmt(scores[i * T + j])),
      el("td", { style: `background:${heat(w)}` }, fmt(w)), el("td", { class: "mono" }, vectorText(part, 3)));
  };
  const seenKeys = Array.from({ length: T }, (_, j) => j).filter((j) => !isMasked(i, j));
  const { shown, rest } = keyOrder(seenKeys, (j) => weights[i * T + j]);
  shown.forEach((j) => table.append(row(j)));
  if (rest.length) {
    const left = rest.reduce((sum, j) => sum + weights[i * T + j], 0);
    table.append(el("tr", { class: "rest-row" }, el("td", { colspan: 6 }, `${rest.length} other keys, each weighing at most ${fmt(weights[i * T + rest[0]])}, together ${fmt(left)}`)));
  }
  const masked = T - seenKeys.length;
  if (masked) table.append(el("tr", { class: "masked" }, el("td", { colspan: 3 }, `${masked} key${masked > 1 ? "s" : ""} the mask hides (${W_ATT ? "the future, and before the window" : `j = ${i + 1}..${T - 1}, the future`})`), el("td", {}, "−∞"), el("td", {}, fmt(0)), el("td", {}, "")));
  box.append(el("div", { class: "controls" }, keysButton(seenKeys.length)), table);
  box.append(el("p", { class: "hint" }, `weight × v_j: what key j adds to the context, the first 3 of its d_k = ${dK} numbers and its length |x|; the context is their sum (the Q, K, V view below shows every number).`));
  const shownDims = Math.min(dK, 8);
  const vector = Array.from(context.subarray(i * dK, i * dK + shownDims), (v) => fmt(v)).join(", ");
  box.append(el("p", { class: "formula" }, `context_${i} = Σ_j weights_j v_j = [${vector}${dK > shownDims ? ", …" : ""}]  (${dK} numbers; the heads' contexts are concatenated${model.weight(`blocks.${state.layer}.attention.W_O`) || model.weight("attention.W_O") ? " and multiplied by W_O" : ""})`));
}

// ---------------------------------------------------------------- inside the model: one position followed through

/** What follows the selected layer, head and position: the attention view and the views inside the model. */
function drawSelection() {
  request("attention-section");
  drawInside();
}

/** A value in [-1, 1] -> red (negative) .. white .. blue (positive), as [r, g, b]. */
function divergingRGB(x) {
  const a = Math.min(1, Math.abs(x));
  return x < 0 ? [255, Math.round(255 - 185 * a), Math.round(255 - 195 * a)] : heatRGB(a);
}

const maxAbs = (v) => v.reduce((m, x) => Math.max(m, Math.abs(x)), 0) || 1;
const vectorLength = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

/** A vector as a strip of coloured cells (red negative, blue positive, scaled by its largest |value|);
 *  hovering a cell names its index and value. One canvas, however long the vector. */
function vectorStrip(v, width = 512) {
  const n = v.length, cell = Math.max(1, Math.floor(width / n));
  const canvas = document.createElement("canvas");
  canvas.width = n * cell;
  canvas.height = 16;
  canvas.className = "strip";
  const ctx = canvas.getContext("2d");
  const scale = maxAbs(v);
  for (let i = 0; i < n; i++) {
    ctx.fillStyle = `rgb(${divergingRGB(v[i] / scale).join(",")})`;
    ctx.fillRect(i * cell, 0, cell, 16);
  }
  canvas.addEventListener("mousemove", (event) => {
    const i = Math.min(n - 1, Math.floor((event.offsetX / canvas.clientWidth) * n));
    canvas.title = `[${i}] = ${fmt(v[i], 4)}`;
  });
  return canvas;
}

/** The first numbers of a vector, and its length. */
function vectorText(v, shown = 4) {
  const head = Array.from(v.subarray(0, shown), (x) => fmt(x)).join(", ");
  return `[${head}${v.length > shown ? ", …" : ""}]  |x| = ${fmt(vectorLength(v), 2)}`;
}

/** A labelled vector: name, formula, strip, numbers. */
function vectorRow(name, formula, v) {
  return el("div", { class: "vec-row" }, el("span", { class: "vec-name" }, name), el("span", { class: "vec-formula hint" }, formula), vectorStrip(v), el("span", { class: "vec-text mono" }, vectorText(v)));
}

/** The window's characters as buttons that choose the followed position (the attention's query). */
function positionPicker(box) {
  const { window: seen } = current;
  const i = queryIndex();
  box.replaceChildren(
    ...seen.map((ch, j) => el("span", { class: "ch att" + (j === i ? " query" : ""), title: `position ${j}`, onclick: () => { state.query = j; state.pinned = true; drawSelection(); } }, glyph(ch)))
  );
}

/** E[token] scaled and the position's code, per position of the window: (T, d) each. */
function embeddingParts(ids) {
  const { d } = model;
  const E = model.weight("embedding.E");
  const tokens = new Float64Array(ids.length * d), positions = new Float64Array(ids.length * d);
  ids.forEach((id, t) => {
    for (let i = 0; i < d; i++) {
      tokens[t * d + i] = E[id * d + i] * model.embeddingScale;
      positions[t * d + i] = model.positions ? model.positions[t * d + i] : 0; // RoPE adds no position code
    }
  });
  return { tokens, positions };
}

/** The words for this model's block, read off its config and weights (a model trained with
 *  model.norm=rms, model.activation=swiglu, RoPE, GQA, ... is described as it computes, not as GPT-2). */
function blockWords() {
  const c = model.config, seed = c.kind === "seed";
  const p = seed ? "" : "blocks.0.";
  const gain = !!model.weight(p + "ln_1.gain") || !!model.weight("ln.gain"), beta = !!model.weight(p + "ln_1.bias") || !!model.weight("ln.bias");
  const rms = c.norm === "rms";
  const norm = rms ? "RMSNorm" : "layer norm";
  const normFormula = (rms ? "x / √(mean(x²) + ε)" : "(x − mean) / √(var + ε)") + (gain ? " · γ" : "") + (beta && !rms ? " + β" : "");
  const activation = c.activation || "gelu";
  const b = (n) => (model.weight(`${p}mlp.b_${n}`) ? ` + b${"₀₁₂₃"[n]}` : ""); // the MLP's biases, where it has them
  const act = { gelu: `GELU(x W₁${b(1)})`, relu2: `ReLU(x W₁${b(1)})²`, swiglu: `SiLU(x W₁${b(1)}) · (x W₃${b(3)})` }[activation];
  const mlpSteps = { gelu: "W₁, GELU, W₂", relu2: "W₁, ReLU², W₂", swiglu: "a SiLU gate W₁ times a value W₃, then W₂" }[activation];
  const kv = c.num_kv_heads && c.num_kv_heads < model.numHeads ? c.num_kv_heads : null;
  const qkv = [
    c.value_embeddings ? "Q = X W_Q, K = X W_K, V = X W_V + E_V[c]" : "Q = X W_Q, K = X W_K, V = X W_V",
    kv ? `${kv} head${kv > 1 ? "s" : ""} of K and V shared by the ${model.numHeads} query heads` : "",
    c.qk_norm ? "each head's Q and K RMS-normalised" : "",
    c.positional === "rope" ? "Q and K rotated by their position (RoPE)" : "",
    c.smeared_keys ? "each key smeared with the one before: k′ⱼ = σ(α) kⱼ + (1 − σ(α)) kⱼ₋₁" : "",
    W_ATT ? `a sliding window: query i sees keys i−${W_ATT - 1}..i only (w = ${W_ATT})` : "",
  ].filter(Boolean).join("; ");
  const readout = (seed ? "context W_out + b_out" : `${norm}_f, then W_vocab`) + (c.logit_softcap ? `, capped: c · tanh(z / c), c = ${c.logit_softcap}` : "");
  return { seed, norm, normFormula, act, b2: b(2), mlpSteps, qkv, readout, hasMLP: !seed && c.mlp_ratio > 0 };
}

/** The block view's sentence, as this model computes (the page is written once for every model). */
function describeBlock() {
  const w = blockWords();
  const hasWO = !!model.weight((w.seed ? "" : "blocks.0.") + "attention.W_O");
  const heads = `attention (${w.qkv}; the heads concatenated${hasWO ? ", times W_O" : ""})`;
  $("flow-hint").textContent = w.seed
    ? `One position through the notes' model, with this text's numbers: E[c] + PE, ${w.norm}, ${heads}, then the output layer (no residual stream, no MLP). Pick a position:`
    : `One position through one block, with this text's numbers: ${w.norm}, ${heads}, added back to the residual stream` +
      (w.hasMLP ? `; ${w.norm}, the MLP (${w.mlpSteps}), added back. Pick a position:` : " (attention only: no MLP). Pick a position:");
  $("lens-hint").textContent = `What the model would predict after each position if it stopped at that depth: the residual stream read out as the last layer is (${w.readout}). Each cell: the top character and its probability (%); an outline where it is the character that really follows.`;
}

/** The views inside the model: the embedding, the block, the heads side by side, Q, K and V. */
function drawInside() {
  request("embed-section", "block-section", "heads-section", "qkv-section");
}

/** One of them: its boxes emptied, then drawn, or a hint where the text gives the model nothing. */
function drawInsideView(boxes, draw) {
  boxes.forEach((id) => $(id).replaceChildren());
  if (current.result) draw();
  else $(boxes[boxes.length - 1]).append(el("p", { class: "hint" }, "Type at least one character of the vocabulary."));
}

function drawEmbedding() {
  const t = queryIndex(), { d } = model, ch = current.window[t];
  const { tokens, positions } = embeddingParts(current.ids);
  const sinusoidal = model.config.positional === "sinusoidal";
  const scaled = model.embeddingScale !== 1 ? ` × √${d}` : "";
  const box = $("embed");
  if (!model.positions) {
    box.append(
      el("p", { class: "formula" }, `position ${t}, ${JSON.stringify(ch)} (id ${current.ids[t]}):  X[${t}] = E[${JSON.stringify(ch)}]  (${d} numbers; hover a cell for its value)`),
      vectorRow(`X[${t}] = E[${glyph(ch)}]`, "the character's row of E, learned", row(current.result.embedded, t, d)),
      el("p", { class: "hint" }, "This model uses RoPE (model.positional=rope): no position code is added here; each head's queries and keys are turned by an angle proportional to their position instead, so that q · k depends on how far apart they are.")
    );
    return;
  }
  box.append(
    el("p", { class: "formula" }, `position ${t}, ${JSON.stringify(ch)} (id ${current.ids[t]}):  X[${t}] = E[${JSON.stringify(ch)}]${scaled} + ${sinusoidal ? "PE" : "P"}[${t}]   (${d} numbers each; hover a cell for its value)`),
    vectorRow(`E[${glyph(ch)}]${scaled}`, "the character's row of E, learned", row(tokens, t, d)),
    vectorRow(`${sinusoidal ? "PE" : "P"}[${t}]`, sinusoidal ? "sin/cos of the position, fixed" : "the position's row of P, learned", row(positions, t, d)),
    vectorRow(`X[${t}]`, model.config.kind === "seed" ? "their sum, then LN (the block view)" : "their sum: the residual stream's start", row(current.result.embedded, t, d))
  );
  box.append(positionPictureOf(t));
}

const pictures = new Map(); // the position picture depends on the position and the width only, not on the text

/** positionPicture(t), drawn once per position and width and then reused: a keystroke redraws no PE map. */
function positionPictureOf(t) {
  const key = `${t} ${mapWidth()}`;
  if (!pictures.has(key)) pictures.set(key, positionPicture(t));
  return pictures.get(key);
}

/** The position codes of every position (rows) and dimension (columns), as the notes draw them, with a
 *  few of the sinusoids as curves: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...). */
function positionPicture(t) {
  const { d } = model, P = model.positions, rows = T_MAX;
  const sinusoidal = model.config.positional === "sinusoidal";
  const scale = maxAbs(P);
  const heat = document.createElement("canvas");
  heat.width = d;
  heat.height = rows;
  const ctx = heat.getContext("2d"), image = ctx.createImageData(d, rows);
  for (let pos = 0; pos < rows; pos++)
    for (let i = 0; i < d; i++) image.data.set([...divergingRGB(P[pos * d + i] / scale), 255], 4 * (pos * d + i));
  ctx.putImageData(image, 0, 0);
  const big = document.createElement("canvas");
  const cw = Math.max(1, Math.floor(Math.min(mapWidth() - 10, 512) / d)), ch = Math.max(2, Math.floor(240 / rows));
  big.width = d * cw;
  big.height = rows * ch;
  big.className = "pe-map";
  const g = big.getContext("2d");
  g.imageSmoothingEnabled = false;
  g.drawImage(heat, 0, 0, big.width, big.height);
  g.strokeStyle = "#d33";
  g.lineWidth = 2;
  g.strokeRect(1, t * ch, big.width - 2, ch);
  const caption = sinusoidal
    ? `PE: one row per position (0 to ${rows - 1}, down), one column per dimension (0 to ${d - 1}, across); red −1, blue +1. Early dimensions turn fast, late ones slowly: each position gets its own pattern. The red box is position ${t}.`
    : `P: the learned position table, one row per position (0 to ${rows - 1}), one column per dimension; red negative, blue positive. Learned from the text, not sinusoids. The red box is position ${t}.`;
  const parts = [el("div", {}, big, el("p", { class: "hint" }, caption))];
  if (sinusoidal) parts.push(el("div", {}, sinusoidCurves(t), el("p", { class: "hint" }, "Dimensions 2i = 0, 2, … as curves over the positions: sin(pos / 10000^(2i/d)), each wave slower than the one before; the dashed line is position " + t + ".")));
  return el("div", { class: "pe-picture" }, ...parts);
}

function sinusoidCurves(t) {
  const { d } = model, P = model.positions, W = 320, H = 150, pad = 20;
  const dims = [...new Set([0, 2, 2 * Math.floor(d / 8), 2 * Math.floor(d / 4)])].filter((i) => i < d);
  const colours = ["#2950c8", "#dc322f", "#2e9d57", "#b7791f"];
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("class", "curve sinusoids");
  const add = (tag, attrs, text) => {
    const n = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
    if (text !== undefined) n.textContent = text;
    svg.append(n);
  };
  const x = (pos) => pad + ((W - 2 * pad) * pos) / Math.max(1, T_MAX - 1);
  const y = (v) => H / 2 - ((H / 2 - pad) * v);
  add("line", { x1: pad, y1: y(0), x2: W - pad, y2: y(0), class: "axis" });
  dims.forEach((i, k) => {
    const points = Array.from({ length: T_MAX }, (_, pos) => `${x(pos)},${y(P[pos * d + i])}`).join(" ");
    add("polyline", { points, style: `stroke:${colours[k]};fill:none;stroke-width:1.5` });
    add("text", { x: pad + 70 * k, y: 12, class: "label", style: `fill:${colours[k]}` }, `dim ${i}`);
  });
  add("line", { x1: x(t), y1: pad, x2: x(t), y2: H - pad, style: "stroke:#d33;stroke-dasharray:3 3" });
  add("text", { x: W - pad, y: H - 4, class: "label", "text-anchor": "end" }, `position ${T_MAX - 1}`);
  return svg;
}

/** One position through one block: every step's vector, with the formula that made it. */
function drawFlow() {
  const t = queryIndex(), { d } = model;
  const seed = model.config.kind === "seed";
  const layers = current.result.blocks.length;
  const l = Math.min(state.layer, layers - 1);
  const b = current.result.blocks[l], att = current.result.attention[l];
  const box = $("flow");
  if (layers > 1) {
    const select = el("select", { id: "flow-layer", "aria-label": "layer" }, ...current.result.blocks.map((_, k) => el("option", { value: k }, `layer ${k}`)));
    select.value = l;
    select.addEventListener("change", () => { state.layer = Number(select.value); state.head = Math.min(state.head, model.numHeads - 1); drawSelection(); });
    box.append(el("label", { class: "controls" }, "block ", select));
  }
  const v = (A, n = d) => row(A, t, n);
  const arrow = (text) => el("div", { class: "flow-arrow hint" }, "↓ " + text);
  const hasWO = !!model.weight((seed ? "" : `blocks.${l}.`) + "attention.W_O");
  const heads = `the ${model.numHeads} heads' contexts side by side (h × d_k = ${model.numHeads} × ${att.dK})`;
  const words = blockWords();
  if (seed) {
    box.append(
      el("p", { class: "formula" }, `position ${t}, ${JSON.stringify(current.window[t])}: X = LN(E[c] + PE) → MultiHead(X) → logits = ${words.readout} (the notes' model: no residual, no MLP)`),
      vectorRow("E + PE", "the embedding view's X", v(b.input)),
      arrow(`${words.norm}: ${words.normFormula}`),
      vectorRow("LN(X)", "what Q, K and V are made from", v(b.ln1)),
      arrow(`${words.qkv}; each head: softmax(Q Kᵀ / √d_k + M) V`),
      vectorRow("concat", heads, v(att.concat))
    );
    if (hasWO) box.append(arrow("× W_O: the heads mixed"), vectorRow("context", "concat W_O", v(b.attention)));
    box.append(arrow(`${words.readout} → the logits of the next character (the bars above, before softmax)`));
    return;
  }
  const rel = (branch, stream) => `adds a vector ${fmt(vectorLength(branch) / vectorLength(stream), 2)}× the stream's length`;
  const normFormula = `${words.norm}: ${words.normFormula}`;
  box.append(
    el("p", { class: "formula" }, `position ${t}, ${JSON.stringify(current.window[t])}, block ${l}: X → X + Attention(LN₁(X))${b.mlp ? " → X + MLP(LN₂(X))" : " (attention only: no MLP)"}; each row one vector of this position (hover a cell for its value)`),
    vectorRow(`X in`, l === 0 ? (model.positions ? "the embedding: E[c] + PE" : "the embedding: E[c]") : `the output of block ${l - 1}`, v(b.input)),
    arrow(`LN₁: ${normFormula}, per position`),
    vectorRow("LN₁(X)", "what Q, K and V are made from", v(b.ln1)),
    arrow(`${words.qkv}; each head: softmax(Q Kᵀ / √d_k + M) V (the attention view)`),
    vectorRow("concat", heads, v(att.concat)),
    arrow(hasWO ? "× W_O: the heads' findings mixed into one d-vector" : "no W_O"),
    vectorRow("attention", "concat W_O: the attention branch", v(b.attention)),
    arrow(`+ residual: X + attention (${rel(v(b.attention), v(b.input))})`),
    vectorRow("X'", b.mlp ? "the stream after attention" : "the block's output", v(b.mid))
  );
  if (!b.mlp) return;
  const width = b.hidden.length / current.T;
  const h = v(b.hidden, width);
  const active = h.reduce((n, x) => n + (x > 0), 0);
  const act = words.act;
  box.append(
    arrow(`LN₂: ${words.norm} again`),
    vectorRow("LN₂(X')", "the MLP's input", v(b.ln2)),
    arrow(`${act}: ${width} hidden units, ${active} of them > 0 here`),
    vectorRow("hidden", act, h),
    arrow(`× W₂${words.b2}: back to d numbers`),
    vectorRow("MLP", "the MLP branch", v(b.mlp)),
    arrow(`+ residual: X' + MLP (${rel(v(b.mlp), v(b.mid))})`),
    vectorRow("X out", l === layers - 1 ? `→ ${words.readout}: the logits (the lens's last row)` : `the input of block ${l + 1}`, v(b.output))
  );
}

/** Every head of the selected layer at a readable size, and what each puts on every key for the query. */
function drawHeadsSide() {
  const att = current.result.attention[state.layer], { T, window: seen } = current, i = queryIndex();
  const box = $("heads-side");
  const width = Math.max(180, Math.min(300, Math.floor(($("heads-section").clientWidth - 40) / Math.min(att.heads.length, 4)) - 12));
  const maps = el("div", { class: "side-maps" });
  att.heads.forEach((head, h) => {
    const canvas = el("canvas", { class: "side-map" + (h === state.head ? " selected" : ""), title: `layer ${state.layer}, head ${h}: click to select` });
    drawMap(canvas, head.weights, T, i, seen, width);
    canvas.addEventListener("click", () => { state.head = h; state.key = null; request("attention-section", "heads-section", "qkv-section"); });
    maps.append(el("figure", {}, canvas, el("figcaption", { class: "hint" }, `head ${h}`)));
  });
  const table = el("table", { class: "side-table" });
  table.append(el("tr", {}, el("th", {}, "key j"), el("th", {}, "char"), ...att.heads.map((_, h) => el("th", {}, `head ${h}`))));
  const heaviest = (j) => Math.max(...att.heads.map((head) => head.weights[i * T + j]));
  const keys = Array.from({ length: i + 1 }, (_, j) => j).filter((j) => !isMasked(i, j));
  const { shown, rest } = keyOrder(keys, heaviest);
  for (const j of shown) {
    table.append(
      el("tr", {}, el("td", {}, String(j)), el("td", { class: "mono" }, glyph(seen[j])), ...att.heads.map((head) => {
        const w = head.weights[i * T + j];
        return el("td", { style: `background:${heat(w)};color:${inkOn(heatRGB(w))}` }, fmt(w));
      }))
    );
  }
  if (rest.length) table.append(el("tr", { class: "rest-row" }, el("td", { colspan: 2 + att.heads.length }, `${rest.length} other keys, each below ${fmt(heaviest(rest[0]))} in every head`)));
  box.append(
    el("p", { class: "hint" }, `Layer ${state.layer}: each head's map (row i: the weights of query i), and below, the weights that query ${i} (${JSON.stringify(seen[i])}) puts on the keys it sees, the heaviest in any head first, one column per head: the same query, a different question each.`),
    maps,
    el("div", { class: "controls" }, keysButton(keys.length)),
    el("div", { class: "side-table-box" }, table)
  );
}

/** One query and one key of the selected head, number by number: q_i · k_j / √d_k is the score. */
function drawQKV() {
  const att = current.result.attention[state.layer], { T, window: seen } = current, { d } = model;
  const i = queryIndex(), dK = att.dK, h = state.head, head = att.heads[h];
  const weightsOf = head.weights.subarray(i * T, i * T + i + 1);
  const j = state.key !== null && state.key <= i ? state.key : argmax(weightsOf);
  const col = (A, t, c) => A[t * d + h * dK + c];
  const select = el("select", { id: "qkv-key", "aria-label": "key" }, ...Array.from({ length: i + 1 }, (_, k) => el("option", { value: k }, `${k} ${glyph(seen[k])}  (weight ${fmt(weightsOf[k])})`)));
  select.value = j;
  select.addEventListener("change", () => { state.key = Number(select.value); request("qkv-section"); });
  const table = el("table", { class: "qkv" });
  table.append(el("tr", {}, ...["c", `q_${i}[c]`, `k_${j}[c]`, "q[c] · k[c]", `v_${j}[c]`, `w · v_${j}[c]`].map((x) => el("th", {}, x))));
  const products = Array.from({ length: dK }, (_, c) => col(att.Q, i, c) * col(att.K, j, c));
  const pScale = maxAbs(products), w = head.weights[i * T + j];
  const qkScale = Math.max(maxAbs(Array.from({ length: dK }, (_, c) => col(att.Q, i, c))), maxAbs(Array.from({ length: dK }, (_, c) => col(att.K, j, c))));
  const vScale = maxAbs(Array.from({ length: dK }, (_, c) => col(att.V, j, c)));
  const cell = (x, scale, digits = 3) => {
    const rgb = divergingRGB(x / scale);
    return el("td", { style: `background:rgb(${rgb.join(",")});color:${inkOn(rgb)}` }, fmt(x, digits));
  };
  for (let c = 0; c < dK; c++)
    table.append(el("tr", {}, el("td", {}, String(c)), cell(col(att.Q, i, c), qkScale), cell(col(att.K, j, c), qkScale), cell(products[c], pScale), cell(col(att.V, j, c), vScale), cell(w * col(att.V, j, c), vScale, 4)));
  const dot = products.reduce((a, b) => a + b, 0);
  $("qkv").append(
    el("div", { class: "controls" }, el("span", {}, `layer ${state.layer}, head ${h}, query ${i} (${JSON.stringify(seen[i])}), key`), select),
    el("p", { class: "formula" }, `q_${i} · k_${j} = Σ_c q[c] k[c] = ${fmt(dot, 4)};  / √d_k = / √${dK} → score ${fmt(dot / Math.sqrt(dK), 4)};  softmax over keys ${firstKey(i)}..${i} → weight ${fmt(w, 4)};  the weight scales v_${j}, and the context sums w · v over every key`),
    el("p", { class: "hint" }, `q_i = the query row of Q (${blockWords().qkv}, from ${blockWords().norm}(X)), k_j and v_j the key's rows of K and V, in head ${h}'s ${dK} columns (${h * dK} to ${(h + 1) * dK - 1}); red negative, blue positive. A key scores high when its vector points where the query's does: the products' column shows which components agree.`),
    el("div", { class: "qkv-box" }, table)
  );
}

// ---------------------------------------------------------------- what each head does, and when

const KIND_COLOURS = { previous_token: "#dbe7ff", duplicate_token: "#fde2c4", induction: "#d7f2dc", first_token: "#ece3f7" };
const KIND_NAMES = { previous_token: "previous-token", duplicate_token: "duplicate-token", induction: "induction", first_token: "first-token" };
const MEASURE_NAMES = { previous_token: "previous", duplicate_token: "duplicate", induction: "induction", first_token: "first", attention_distance: "distance" };
let headsNow = null; // this checkpoint's scores, computed in the page once the views are drawn

/** The scores of src/model/head_scores.py, from this page's forward pass over the payload's probe
 *  (B rows of s s, n = context_window // 2): each a mean over the rows and the positions it names,
 *    previous = A[i, i-1] (1 <= i < 2n), first = A[i, 0] (1 <= i < 2n), distance = sum_j A[i, j] (i - j) (all i),
 *    duplicate = A[i, i-n], induction = A[i, i-n+1] (n <= i < 2n),
 *  and in-context = mean CE_t over n < t < 2n minus over 0 < t < n. Computed in slices of ~30 ms. */
function scoreHeads() {
  const P = payload.heads, n = P.n, T = 2 * n, B = P.probe.length, V = model.vocabSize;
  const L = model.config.kind === "seed" ? 1 : model.config.num_layers, H = model.numHeads;
  const scores = Object.fromEntries(P.measures.map((m) => [m, Array.from({ length: L }, () => new Array(H).fill(0))]));
  let inContext = 0, probeMaps = null, b = 0;
  return new Promise((resolve) => {
    function next() {
      const until = performance.now() + 30;
      while (b < B && performance.now() < until) {
        const ids = P.probe[b], result = forward(model, ids);
        result.attention.forEach((att, l) => att.heads.forEach((head, h) => {
          const A = head.weights;
          let prev = 0, first = 0, dist = 0, dup = 0, ind = 0;
          for (let i = 1; i < T; i++) { prev += A[i * T + i - 1]; first += A[i * T]; }
          for (let i = 0; i < T; i++) for (let j = 0; j <= i; j++) dist += A[i * T + j] * (i - j);
          for (let i = n; i < T; i++) { dup += A[i * T + i - n]; ind += A[i * T + i - n + 1]; }
          scores.previous_token[l][h] += prev / (T - 1) / B;
          scores.first_token[l][h] += first / (T - 1) / B;
          scores.attention_distance[l][h] += dist / T / B;
          scores.duplicate_token[l][h] += dup / n / B;
          scores.induction[l][h] += ind / n / B;
        }));
        const CE = (t) => -Math.log(softmax(row(result.logits, t - 1, V))[ids[t]]); // -log p(x_t | x_<t)
        let early = 0, late = 0;
        for (let t = 1; t < n; t++) early += CE(t) / (n - 1);
        for (let t = n + 1; t < T; t++) late += CE(t) / (n - 1);
        inContext += (late - early) / B;
        if (b === 0) probeMaps = result.attention.map((att) => att.heads.map((head) => head.weights));
        b++;
      }
      if (b < B) setTimeout(next, 0);
      else resolve({ scores, kinds: kindsOf(scores), inContext, probeMaps });
    }
    setTimeout(next, 0);
  });
}

/** Each head's kind: its strongest score among the kinds when at least the threshold, else null. */
function kindsOf(scores) {
  const { kinds, threshold } = payload.heads;
  return scores[kinds[0]].map((layer, l) => layer.map((_, h) => {
    let best = null, value = -Infinity;
    for (const kind of kinds) if (scores[kind][l][h] > value) { value = scores[kind][l][h]; best = kind; }
    return value >= threshold ? best : null;
  }));
}

/** A stored map, [i][j <= i] in thousandths, as the (T, T) weights drawMap reads. */
function storedMap(rows) {
  const T = rows.length, A = new Float64Array(T * T);
  rows.forEach((r, i) => r.forEach((w, j) => { A[i * T + j] = w / 1000; }));
  return A;
}

/** The time-lapse's frames: each stored validation, then this checkpoint computed in the page (null). */
function headFrames() {
  const history = payload.heads.history;
  return [...(history ? history.snapshots : []), null];
}

function drawTimelapse() {
  const box = $("timelapse"), P = payload.heads;
  if (!P) {
    box.replaceChildren(el("p", { class: "hint" }, `The model's window (${T_MAX}) is too short for the repeated probe (two copies of at least 2 characters): no head scores.`));
    return;
  }
  const frames = headFrames();
  if (state.frame === undefined) state.frame = frames.length - 1;
  const slider = el("input", { type: "range", id: "step-slider", min: 0, max: frames.length - 1, step: 1, "aria-label": "validation step" });
  slider.value = state.frame;
  slider.disabled = frames.length === 1;
  slider.addEventListener("input", () => { state.frame = Number(slider.value); drawTimelapse(); drawView("job-section"); request("circuits-section"); });
  const frame = frames[state.frame];
  const label = frame
    ? `step ${frame.step}: validation ${state.frame + 1} of ${frames.length - 1} stored by the run` + (frame.val_loss !== null ? `, val loss ${frame.val_loss.toFixed(4)}` : "") + `, in-context ${fmt(frame.in_context)} (probe)` + (frame.in_context_text !== null && frame.in_context_text !== undefined ? `, ${fmt(frame.in_context_text)} (text)` : "")
    : `this checkpoint (step ${payload.step}), computed in the page` + (headsNow ? `: in-context ${fmt(headsNow.inContext)} (probe: loss on the 2nd copy minus the 1st)` : ": scoring…");
  const note = P.history
    ? `The run's ${frames.length - 1} validations (${P.history.file}): play or slide to watch the heads form; the last position is this checkpoint.`
    : "This checkpoint's run kept no head scores (no head_scores.json beside it: trained before the callback existed, or with callbacks.head_scores=null), so there is no time-lapse; the scores below are this checkpoint's, computed in the page.";
  const play = el("button", { id: "lapse-play", onclick: togglePlayLapse }, state.lapse ? "❚❚ pause" : "▶ play");
  play.disabled = frames.length === 1;
  // Steps under the slider: the first and about four more, each under its position, then "now" (this checkpoint).
  const every = Math.max(1, Math.ceil((frames.length - 1) / 5));
  const ticks = frames.map((f, k) => (f && k % every === 0 && frames.length - 1 - k >= every / 2 ? el("span", { style: `left:${(100 * k) / Math.max(1, frames.length - 1)}%` }, String(f.step)) : null)).filter(Boolean);
  const scale = el("div", { class: "lapse-scale" }, slider, el("div", { class: "lapse-ticks hint" }, ...ticks, el("span", { style: "left:100%" }, "now")));
  box.replaceChildren(el("p", { class: "hint", id: "timelapse-note" }, note), el("div", { class: "controls" }, play, scale, el("span", { id: "step-label" }, label)));
}

/** Play the time-lapse: a validation every LAPSE_MS, from the first (or from where it stands), to this checkpoint. */
const LAPSE_MS = 700;
function togglePlayLapse() {
  if (state.lapse) {
    clearInterval(state.lapse);
    state.lapse = null;
  } else {
    const last = headFrames().length - 1;
    if (state.frame === last) state.frame = 0;
    state.lapse = setInterval(() => {
      state.frame = Math.min(state.frame + 1, last);
      if (state.frame === last) { clearInterval(state.lapse); state.lapse = null; }
      drawTimelapse();
      drawView("job-section");
    }, LAPSE_MS);
  }
  drawTimelapse();
  drawView("job-section");
}

/** The head the time-lapse opens on: the strongest induction head (what the time-lapse is for), else the
 * strongest head of any kind, else layer 0's head 0; judged at the run's last stored validation. */
function strongestHead(data) {
  for (const kind of ["induction", ...payload.heads.kinds.filter((k) => k !== "induction")]) {
    let best = null, value = -Infinity;
    data.kinds.forEach((layer, l) => layer.forEach((k, h) => {
      if (k === kind && data.scores[kind][l][h] > value) { value = data.scores[kind][l][h]; best = [l, h]; }
    }));
    if (best) return best;
  }
  return [0, 0];
}

/** The layers x heads grid of the chosen frame, and the chosen head's maps. */
function drawHeadJob() {
  const P = payload.heads, grid = $("job-grid"), maps = $("job-maps");
  if (!P) return;
  const frame = headFrames()[state.frame];
  const data = frame ?? headsNow;
  if (!data) {
    grid.replaceChildren(el("p", { class: "hint" }, "scoring this checkpoint's heads on the probe…"));
    maps.replaceChildren();
    return;
  }
  const [L, H] = [data.scores.induction.length, data.scores.induction[0].length];
  state.jobHead ??= strongestHead(headFrames().at(-2) ?? data);
  const [sl, sh] = state.jobHead;
  const table = el("table", { class: "job" });
  table.append(el("tr", {}, el("th", {}, ""), ...Array.from({ length: H }, (_, h) => el("th", {}, `head ${h}`))));
  for (let l = 0; l < L; l++) {
    table.append(el("tr", {}, el("th", {}, `layer ${l}`), ...Array.from({ length: H }, (_, h) => {
      const kind = data.kinds[l][h];
      const text = P.measures.map((m) => `${MEASURE_NAMES[m].padEnd(9)} ${fmt(data.scores[m][l][h], m === "attention_distance" ? 2 : 3)}`).join("\n");
      return el("td", { class: l === sl && h === sh ? "selected" : "", style: kind ? `background:${KIND_COLOURS[kind]}` : "", title: `layer ${l}, head ${h}: click for its maps`, onclick: () => { state.jobHead = [l, h]; drawView("job-section"); request("circuits-section"); } },
        el("div", { class: "kind" }, kind ? KIND_NAMES[kind] : "no kind"), el("div", { class: "scores" }, text));
    })));
  }
  const swatches = P.kinds.map((k) => el("span", { class: "legend-swatch-box" }, el("span", { class: "legend-swatch", style: `background:${KIND_COLOURS[k]};border:1px solid #d0d5dd` }), KIND_NAMES[k]));
  grid.replaceChildren(el("div", { class: "job-box" }, table), el("div", { class: "legend" }, ...swatches, el("span", {}, `(threshold ${P.threshold})`)));
  const probeChars = P.probe[0].map((id) => model.vocab[id]);
  const width = Math.max(180, Math.min(360, Math.floor(($("job-section").clientWidth - 40) / 2) - 12));
  const figure = (weights, chars, caption) => {
    const canvas = el("canvas", { class: "side-map" });
    drawMap(canvas, weights, chars.length, null, chars, width);
    return el("figure", { style: `max-width:${width + 4}px` }, canvas, el("figcaption", { class: "hint" }, caption));
  };
  const stripe = `an induction head draws a stripe n − 1 = ${P.n - 1} below the diagonal in the second half`;
  const parts = [];
  if (frame && frame.maps) {
    const prompt = P.history.prompt;
    parts.push(figure(storedMap(frame.maps.probe[sl][sh]), probeChars, `layer ${sl}, head ${sh} at step ${frame.step}, on the repeated probe: ${stripe}`));
    parts.push(figure(storedMap(frame.maps.prompt[sl][sh]), Array.from(prompt.text), `the same head at step ${frame.step}, on the opening prompt`));
  } else if (frame) {
    parts.push(el("p", { class: "hint" }, `The maps of step ${frame.step} were left out to keep the page under 8 MB; its scores are all here.`));
  } else {
    parts.push(figure(headsNow.probeMaps[sl][sh], probeChars, `layer ${sl}, head ${sh} on the repeated probe (its first string, written twice): ${stripe}`));
    if (current.result) parts.push(figure(current.result.attention[sl].heads[sh].weights, current.window, "the same head on your text"));
  }
  maps.replaceChildren(...parts);
}

// ---------------------------------------------------------------- how a head does it: its circuits (issue 45)

let circuitsNow = null; // this checkpoint's circuits, computed in the page (circuits.js) when first shown
let circuitsShown = null; // what the view drew last: its step, head and maps (for the tests)
let bigramNow = null; // the excerpt's bigram log-probabilities, (V, V)

function finalCircuits() {
  if (!circuitsNow) {
    const start = performance.now();
    circuitsNow = { ...circuits(model), ms: performance.now() - start };
  }
  return circuitsNow;
}

function excerptBigrams() {
  if (!bigramNow) {
    const ids = Array.from(payload.excerpt.text).filter((ch) => index.has(ch)).map((ch) => index.get(ch));
    bigramNow = { table: bigramLogProbs(ids, model.vocabSize), count: ids.length };
  }
  return bigramNow;
}

/** A stored circuit map, thousandths of its largest |value|, back to values: (V, V). */
function storedCircuit(ints, scale) {
  return Float64Array.from(ints.flat(), (x) => (x / 1000) * scale);
}

/** What the circuits view draws for the slider's frame: the maps of `head` ([layer, head]; null when
 *  the frame kept none), every head's positivity, the composition scores and the direct path. */
function circuitsOfFrame(frame, [l, h]) {
  if (!frame) {
    const c = finalCircuits();
    return { step: payload.step, qk: c.qk[l][h], ov: c.ov[l][h], direct: c.direct, positivity: c.positivity, composition: c.composition };
  }
  const c = frame.circuits;
  if (!c) return null; // a run written before the circuits were tracked
  const m = c.maps;
  return {
    step: frame.step,
    qk: m ? storedCircuit(m.qk[l][h], m.scale.qk[l][h]) : null,
    ov: m ? storedCircuit(m.ov[l][h], m.scale.ov[l][h]) : null,
    direct: m && m.direct ? storedCircuit(m.direct, m.scale.direct) : null,
    positivity: c.positivity,
    composition: c.composition,
    runCorrelation: c.direct_correlation,
  };
}

/** The largest entries of a (V, V) map, largest first: [row, column, value]. */
function topEntries(M, V, count = 8) {
  return [...M.keys()].sort((a, b) => M[b] - M[a]).slice(0, count).map((k) => [Math.floor(k / V), k % V, M[k]]);
}

/** A V x V map with the characters on both axes (where a cell is wide enough to letter), red negative,
 *  blue positive, scaled by its largest |value|; hovering a cell says its value and what it means. */
function circuitMap(M, V, width, words) {
  const label = 14, size = Math.max(2, Math.floor((width - label) / V));
  const canvas = el("canvas", { class: "circuit-map" });
  canvas.width = canvas.height = label + V * size;
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  const scale = maxAbs(M);
  for (let a = 0; a < V; a++)
    for (let b = 0; b < V; b++) {
      ctx.fillStyle = `rgb(${divergingRGB(M[a * V + b] / scale).join(",")})`;
      ctx.fillRect(label + b * size, label + a * size, size, size);
    }
  if (size >= 7) {
    ctx.font = `${Math.min(11, size + 1)}px ui-monospace, monospace`;
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    ctx.fillStyle = "#555";
    for (let a = 0; a < V; a++) {
      ctx.fillText(glyph(model.vocab[a]), label / 2, label + a * size + size / 2);
      ctx.fillText(glyph(model.vocab[a]), label + a * size + size / 2, label / 2);
    }
  }
  const hide = () => { $("tooltip").hidden = true; };
  canvas.addEventListener("mousemove", (event) => {
    const k = canvas.width / canvas.clientWidth; // the canvas may be shown narrower than drawn
    const [a, b] = [Math.floor((event.offsetY * k - label) / size), Math.floor((event.offsetX * k - label) / size)];
    if (a < 0 || b < 0 || a >= V || b >= V) return hide();
    const tip = $("tooltip");
    tip.replaceChildren(el("div", {}, words(model.vocab[a], model.vocab[b], M[a * V + b], M[a * V + b] / scale)));
    tip.hidden = false;
    tip.style.left = `${event.pageX + 12}px`;
    tip.style.top = `${event.pageY + 12}px`;
  });
  canvas.addEventListener("mouseleave", hide);
  return canvas;
}

const quote = (ch) => JSON.stringify(ch);
/** What a cell of each map means, in words (the hover text). */
const CIRCUIT_WORDS = {
  qk: (a, b, v, f) => `query ${quote(a)}, key ${quote(b)}: ${fmt(v)} (${fmt(f, 2)} of the largest): when the query is ${quote(a)} this head ${v >= 0 ? "looks for" : "avoids"} keys ${quote(b)}`,
  ov: (a, b, v, f) => `attended ${quote(a)}, logit ${quote(b)}: ${fmt(v)} (${fmt(f, 2)} of the largest): attending to ${quote(a)}, this head ${v >= 0 ? "raises" : "lowers"} the logit of ${quote(b)}`,
  direct: (a, b, v) => `${quote(a)} then ${quote(b)}: ${fmt(v)}: after ${quote(a)} the direct path (no head) ${v >= 0 ? "raises" : "lowers"} the logit of ${quote(b)}`,
  bigram: (a, b, v) => `log p(${quote(b)} | ${quote(a)}) in the excerpt, minus its row's mean: ${fmt(v)}`,
};

/** The QK and OV circuits of the clicked head at the slider's step, their top entries, the direct path
 *  beside the excerpt's bigrams, every head's positivity and the composition of every pair. */
function drawCircuits() {
  const box = $("circuits");
  if (!payload.heads) return box.replaceChildren();
  const frames = headFrames(), frame = frames[state.frame ?? frames.length - 1];
  const [l, h] = state.jobHead ?? [0, 0];
  const c = circuitsOfFrame(frame, [l, h]), V = model.vocabSize;
  circuitsShown = c && { step: c.step, head: [l, h], qk: c.qk && Array.from(c.qk), ov: c.ov && Array.from(c.ov), direct: c.direct && Array.from(c.direct) };
  const picker = el("select", { id: "circuit-head", "aria-label": "head" });
  const L = model.config.kind === "seed" ? 1 : model.config.num_layers;
  for (let a = 0; a < L; a++) for (let b = 0; b < model.numHeads; b++) picker.append(el("option", { value: `${a}.${b}` }, `layer ${a}, head ${b}`));
  picker.value = `${l}.${h}`;
  picker.addEventListener("change", () => { state.jobHead = picker.value.split(".").map(Number); drawView("circuits-section"); request("job-section"); });
  const parts = [el("div", { class: "controls" }, el("label", {}, "head ", picker), el("span", { id: "circuit-step" }, frame ? `step ${frame.step} (the time-lapse's slider, above)` : `this checkpoint (step ${payload.step}), computed in the page in ${finalCircuits().ms.toFixed(0)} ms`))];
  if (!c) {
    parts.push(el("p", { class: "hint" }, "This run's head_scores.json was written before the circuits were tracked: slide to the last position, this checkpoint, for its circuits."));
    return box.replaceChildren(...parts);
  }
  const room = $("circuits-section").clientWidth - 36; // two maps side by side where they fit at 5 px a cell or more, else one a row
  const width = room < 2 * (14 + 5 * V) + 24 ? room : Math.min(540, Math.floor(room / 2) - 12);
  const figure = (M, kind, caption) => el("figure", { style: `max-width:${width + 4}px` }, circuitMap(M, V, width, CIRCUIT_WORDS[kind]), el("figcaption", { class: "hint" }, caption));
  const top = (M, arrow) => el("p", { class: "mono top-entries", style: `max-width:${width + 4}px` }, ...topEntries(M, V).map(([a, b, v]) => el("span", {}, `${glyph(model.vocab[a])}${arrow}${glyph(model.vocab[b])} ${fmt(v, 2)}`)));
  const pos = (kind) => fmt(c.positivity[kind][l][h], 2);
  if (c.qk) {
    parts.push(el("div", { class: "side-maps" },
      el("div", {}, figure(c.qk, "qk", `QK: W_E W_Q (W_E W_K)ᵀ / √d_head. Row: the query's character, column: the key's. Blue: the head looks for that key. Positivity ${pos("qk")}.`), el("p", { class: "hint" }, "looks for most (query → key):"), top(c.qk, "→")),
      el("div", {}, figure(c.ov, "ov", `OV: W_E W_V W_O W_U. Row: the character attended to, column: the logit it moves. A copying head is blue on the diagonal (positivity near +1; this head ${pos("ov")}).`), el("p", { class: "hint" }, "raises most (attended → logit):"), top(c.ov, "→"))));
  } else parts.push(el("p", { class: "hint" }, `The maps of step ${frame.step} were left out to keep the page under 8 MB; its positivity and composition are all here.`));
  parts.push(el("h3", {}, "The direct path, beside the text's bigrams"));
  if (model.config.kind === "seed") parts.push(el("p", { class: "hint" }, "The notes' model has no residual stream: every logit goes through a head, so there is no direct path."));
  else if (c.direct) {
    const { table, count } = excerptBigrams();
    const r = correlation(centre(Float64Array.from(c.direct), V, V, 1), centre(Float64Array.from(table), V, V, 1)); // each row centred, as circuits.py does
    parts.push(el("div", { class: "side-maps" },
      figure(c.direct, "direct", "W_E W_U: the logits the embedding alone gives the next character, through no head. Row: the current character, column: the next."),
      figure(centre(Float64Array.from(table), V, V, 1), "bigram", `log p(next | current) over the excerpt's ${count.toLocaleString("en-US")} characters (add-one smoothed), each row minus its mean as a logit's row may be: only differences within a row change a prediction.`)),
      el("p", { id: "direct-correlation" }, `correlation of the two tables: r = ${fmt(r)}` + (typeof c.runCorrelation === "number" ? `; the run's own, against its training text: ${fmt(c.runCorrelation)}` : "")));
  }
  parts.push(el("h3", {}, "Every head's positivity"), positivityTable(c.positivity, [l, h]));
  parts.push(el("h3", {}, "Composition: how much a later head reads what an earlier one writes"), compositionTables(c.composition));
  box.replaceChildren(...parts);
}

/** Layers x heads: each head's OV and QK positivity, sum λ / sum |λ|. */
function positivityTable(p, [sl, sh]) {
  const table = el("table", { class: "head-grid positivity" });
  table.append(el("tr", {}, el("th", {}, ""), ...p.ov[0].map((_, h) => el("th", {}, `head ${h}`))));
  p.ov.forEach((layer, l) => table.append(el("tr", {}, el("th", {}, `layer ${l}`), ...layer.map((ov, h) => {
    const rgb = divergingRGB(ov);
    return el("td", { class: l === sl && h === sh ? "selected" : "", style: `background:rgb(${rgb.join(",")});color:${inkOn(rgb)}`, title: `layer ${l}, head ${h}: OV positivity ${fmt(ov)} (+1: every eigenvalue positive, a copying head), QK positivity ${fmt(p.qk[l][h])} (+1: it attends to the same characters it is queried with)` },
      `OV ${fmt(ov, 2)}\nQK ${fmt(p.qk[l][h], 2)}`);
  }))));
  return el("div", { class: "job-box" }, table, el("p", { class: "hint" }, "sum of the eigenvalues over the sum of their magnitudes; blue: OV positivity near +1, the head copies what it attends to into the prediction."));
}

/** The Q-, K- and V-composition of every earlier head (rows) and later head (columns). */
function compositionTables(scores) {
  const L = scores.q.length, H = scores.q[0].length;
  if (L < 2) return el("p", { class: "hint" }, "One layer: no head comes after another, so nothing composes.");
  const names = (from, to) => Array.from({ length: (to - from) * H }, (_, k) => [from + Math.floor(k / H), k % H]);
  const earlier = names(0, L - 1), later = names(1, L);
  const max = Math.max(...["q", "k", "v"].flatMap((m) => scores[m].flat(3)));
  const tables = ["q", "k", "v"].map((kind) => {
    const table = el("table", { class: "composition" });
    table.append(el("tr", {}, el("th", {}, `${kind.toUpperCase()}`), ...later.map(([l, h]) => el("th", {}, `${l}.${h}`))));
    for (const [l1, h1] of earlier)
      table.append(el("tr", {}, el("th", {}, `${l1}.${h1}`), ...later.map(([l2, h2]) => {
        if (l2 <= l1) return el("td", { class: "none" });
        const s = scores[kind][l1][h1][l2][h2];
        return el("td", { style: `background:${heat(s / max)};color:${inkOn(heatRGB(s / max))}`, title: `${kind.toUpperCase()}-composition of layer ${l1} head ${h1} into layer ${l2} head ${h2}: ${fmt(s)}` }, fmt(s, 2));
      })));
    return el("div", { class: "job-box" }, table);
  });
  return el("div", {}, el("p", { class: "hint" }, "‖A B‖_F / (‖A‖_F ‖B‖_F), A the earlier head's OV (row layer.head), B the later head's (column): Q: W_Q W_Kᵀ, K: its transpose, V: W_V W_O. Random heads score low; a previous-token head feeding an induction head scores high in K."), el("div", { class: "composition-tables" }, ...tables));
}

// ---------------------------------------------------------------- take a head out (issue 45)

/** Each head switched off: "l.h" -> {mode: "zero" | "mean", mean: (d_k,) | null}. The mean is the head's
 *  context averaged over the shown text's positions when it was switched. */
const removedHeads = new Map();

/** The forward pass's argument: [layer] {head: null | mean}. */
function removedSpec() {
  const L = model.config.kind === "seed" ? 1 : model.config.num_layers;
  const spec = Array.from({ length: L }, () => ({}));
  for (const [key, { mean }] of removedHeads) { const [l, h] = key.split(".").map(Number); spec[l][h] = mean; }
  return spec;
}

/** A head's context (T, d_k) averaged over the T positions: (d_k,). */
function meanContext(result, l, h) {
  const { context } = result.attention[l].heads[h], dK = result.attention[l].dK, T = context.length / dK;
  const mean = new Float64Array(dK);
  for (let t = 0; t < T; t++) for (let c = 0; c < dK; c++) mean[c] += context[t * dK + c] / T;
  return mean;
}

/** The mean loss of a forward pass over ids, -log p(ids[t+1] | ids[..t]) over its T - 1 predictions. */
function textLoss(result, ids) {
  let sum = 0;
  for (let t = 0; t + 1 < ids.length; t++) sum -= Math.log(softmax(row(result.logits, t, model.vocabSize))[ids[t + 1]]);
  return ids.length > 1 ? sum / (ids.length - 1) : null;
}

/** A promise of the in-context score on the probe (as scoreHeads computes it) with these heads taken
 *  out, computed in slices of ~30 ms, a probe row at a time: the page stays responsive meanwhile. */
function inContextWithout(spec) {
  const P = payload.heads, n = P.n, V = model.vocabSize;
  let score = 0, b = 0;
  return new Promise((resolve) => {
    function next() {
      const until = performance.now() + 30;
      while (b < P.probe.length && performance.now() < until) {
        const ids = P.probe[b++], result = forward(model, ids, spec);
        const CE = (t) => -Math.log(softmax(row(result.logits, t - 1, V))[ids[t]]);
        let early = 0, late = 0;
        for (let t = 1; t < n; t++) early += CE(t) / (n - 1);
        for (let t = n + 1; t < 2 * n; t++) late += CE(t) / (n - 1);
        score += (late - early) / P.probe.length;
      }
      if (b < P.probe.length) setTimeout(next, 0);
      else resolve(score);
    }
    setTimeout(next, 0);
  });
}

// the in-context score without the switched heads: computed once per setting of the switches (`run`)
let ablation = { run: 0, inContext: null, started: false };

/** The switches, and what the model loses: the next character, the loss on the shown text, the in-context score. */
function drawAblation() {
  const box = $("ablate");
  const L = model.config.kind === "seed" ? 1 : model.config.num_layers;
  const table = el("table", { class: "head-grid ablate" });
  table.append(el("tr", {}, el("th", {}, ""), ...Array.from({ length: model.numHeads }, (_, h) => el("th", {}, `head ${h}`))));
  for (let l = 0; l < L; l++)
    table.append(el("tr", {}, el("th", {}, `layer ${l}`), ...Array.from({ length: model.numHeads }, (_, h) => {
      const key = `${l}.${h}`;
      const select = el("select", { "aria-label": `layer ${l} head ${h}`, "data-head": key }, ...[["on", "on"], ["zero", "off (zero)"], ["mean", "mean"]].map(([v, t]) => el("option", { value: v }, t)));
      select.value = removedHeads.get(key)?.mode ?? "on";
      select.disabled = !current.result;
      select.addEventListener("change", () => switchHead(l, h, select.value));
      return el("td", { class: removedHeads.has(key) ? "selected" : "" }, select);
    })));
  const parts = [el("div", { class: "job-box" }, table)];
  if (!current.result) return box.replaceChildren(...parts, el("p", { class: "hint" }, "Type at least one character of the vocabulary."));
  const spec = removedSpec(), after = removedHeads.size ? forward(model, current.ids, spec) : current.result;
  const T = current.T, lossBefore = textLoss(current.result, current.ids);
  const probs = softmax(Float64Array.from(row(after.logits, T - 1, model.vocabSize)));
  const loss = textLoss(after, current.ids);
  const inContextBefore = headsNow ? headsNow.inContext : null;
  if (removedHeads.size && payload.heads && !ablation.started) {
    ablation.started = true;
    const run = ablation.run;
    inContextWithout(spec).then((score) => {
      if (ablation.run !== run) return; // the switches changed meanwhile
      ablation.inContext = score;
      request("ablate-section");
    });
  }
  const inContext = removedHeads.size ? ablation.inContext : inContextBefore;
  const delta = (a, b) => (a === null || b === null ? "" : ` (${b - a >= 0 ? "+" : ""}${fmt(b - a)})`);
  const rowsOf = [
    [`loss on the shown text (nats, its ${T - 1} predictions)`, lossBefore, loss, "–"],
    ["in-context score on the probe (nats)", inContextBefore, inContext, payload.heads ? "scoring the probe…" : "no probe (window under 4)"],
  ];
  const summary = el("table", { class: "ablate-summary" }, el("tr", {}, ...["", "all heads", "without the switched heads"].map((x) => el("th", {}, x))),
    ...rowsOf.map(([name, a, b, missing]) => el("tr", {}, el("th", {}, name), el("td", {}, a === null ? missing : fmt(a)), el("td", { class: "after" }, b === null ? missing : fmt(b) + delta(a, b)))));
  const order = [...current.probs.keys()].sort((a, b) => Math.max(current.probs[b], probs[b]) - Math.max(current.probs[a], probs[a])).slice(0, 8);
  const next = el("table", { class: "ablate-next" }, el("tr", {}, ...["next", "all heads", "without"].map((x) => el("th", {}, x))),
    ...order.map((k) => el("tr", {}, el("td", { class: "mono" }, glyph(model.vocab[k])), el("td", {}, `${(100 * current.probs[k]).toFixed(1)}%`), el("td", { class: "after" }, `${(100 * probs[k]).toFixed(1)}%`))));
  parts.push(el("div", { class: "ablate-results" }, summary, next));
  box.replaceChildren(...parts);
}

function switchHead(l, h, mode) {
  const key = `${l}.${h}`;
  if (mode === "on") removedHeads.delete(key);
  else removedHeads.set(key, { mode, mean: mode === "mean" ? meanContext(current.result, l, h) : null });
  ablation = { run: ablation.run + 1, inContext: null, started: false };
  drawView("ablate-section");
}

// ---------------------------------------------------------------- logit lens

/** The indices of the three largest of p, largest first (one pass, not a sort of the vocabulary). */
function topThree(p) {
  const top = [];
  for (let k = 0; k < p.length; k++) {
    if (top.length === 3 && p[k] <= p[top[2]]) continue;
    top.push(k);
    top.sort((a, b) => p[b] - p[a] || a - b);
    if (top.length > 3) top.pop();
  }
  return top;
}

function drawLens() {
  const box = $("lens-grid");
  box.replaceChildren();
  $("lens-note").textContent = "";
  if (!current.result) return;
  const { T, window: seen, result } = current;
  const V = model.vocabSize;
  const table = el("table", { class: "lens" });
  table.append(el("tr", {}, el("th", {}, "reads"), ...seen.map((ch, t) => el("th", { class: "mono", title: `position ${t}` }, glyph(ch)))));
  result.stream.forEach((S, l) => {
    // (T, V) logits of every position read at this depth; the last depth's are the model's own logits
    const probs = l === result.stream.length - 1 ? result.logits : result.readout(S);
    const name = l === 0 ? (model.config.kind === "seed" ? "input (after LN)" : "embedding") : l === result.stream.length - 1 ? `layer ${l - 1} = output` : `after layer ${l - 1}`;
    const cells = [];
    for (let t = 0; t < T; t++) {
      const p = softmax(row(probs, t, V));
      const best = argmax(p);
      const nextTrue = t + 1 < T ? seen[t + 1] : null;
      const top3 = topThree(p).map((k) => `${JSON.stringify(model.vocab[k])} ${(100 * p[k]).toFixed(1)}%`);
      const ink = inkOn(heatRGB(p[best])); // the text, and the outline of a hit, in the colour that reads on this cell
      cells.push(
        el(
          "td",
          { class: "mono lens-cell" + (nextTrue === model.vocab[best] ? " hit" : ""), style: `background:${heat(p[best])};color:${ink};outline-color:${ink}`, title: `position ${t}, read after ${name}: ${top3.join(", ")}` + (nextTrue !== null ? `; next is ${JSON.stringify(nextTrue)}` : "") },
          glyph(model.vocab[best]),
          el("small", {}, Math.round(100 * p[best]).toString())
        )
      );
    }
    table.append(el("tr", {}, el("th", { class: "lens-name" }, name), ...cells));
  });
  box.append(table);
  box.scrollLeft = box.scrollWidth; // the last position, the prediction, in sight on a narrow screen
  if (model.config.kind !== "seed" && !model.weight("W_vocab"))
    $("lens-note").textContent =
      "Why the embedding row mostly names its own input: this model's output head is tied to its embedding (logits = x Eᵀ, W_vocab = Eᵀ), so reading the embedding row scores every character c by E[c] · x, where x is the input character's own embedding plus its position's code: the largest score is usually the input character itself, with the probability its cell shows (the position's code pulls it down). The row shows the tie, not a prediction; the rows after each layer are what the model computes.";
}

// ---------------------------------------------------------------- where it fails

/** Per-character losses over the excerpt, scored as validation scores a split: non-overlapping
 *  windows at 0, T, 2T, ..., and a last window that ends at the end, scoring only what is left. */
function scoreExcerpt(onProgress) {
  const chars = Array.from(payload.excerpt.text);
  const ids = [], where = [];
  chars.forEach((ch, k) => { if (index.has(ch)) { ids.push(index.get(ch)); where.push(k); } });
  const losses = new Array(chars.length).fill(null);
  const nTargets = ids.length - 1;
  const T = Math.min(T_MAX, nTargets);
  const starts = [];
  for (let s = 0; s + T <= nTargets; s += T) starts.push(s);
  const scoredByWhole = starts.length * T;
  if (nTargets > scoredByWhole) starts.push(nTargets - T); // the tail window
  return new Promise((resolve) => {
    let w = 0;
    function next() {
      const until = performance.now() + 30; // stay responsive: 30 ms of work at a time
      while (w < starts.length && performance.now() < until) {
        const s = starts[w];
        const result = forward(model, ids.slice(s, s + T));
        const firstScored = s < scoredByWhole ? 0 : scoredByWhole - s; // the tail scores what no whole window did
        for (let t = firstScored; t < T; t++) {
          const p = softmax(row(result.logits, t, model.vocabSize));
          const target = ids[s + t + 1];
          losses[where[s + t + 1]] = { loss: -Math.log(p[target]), p, target };
        }
        w++;
      }
      onProgress(w, starts.length);
      if (w < starts.length) setTimeout(next, 0);
      else {
        const scored = losses.filter((x) => x !== null);
        const mean = scored.reduce((a, x) => a + x.loss, 0) / scored.length;
        resolve({ chars, losses, meanLoss: mean, count: scored.length });
      }
    }
    setTimeout(next, 0);
  });
}

let excerptScores = null;

function drawFailures() {
  const box = $("fail-text");
  $("fail-source").textContent = `${payload.excerpt.source}, coloured by the loss of each character (−log p of the true character); hover one to see what the model expected.`;
  if (Array.from(payload.excerpt.text).filter((ch) => index.has(ch)).length < 2) {
    $("fail-summary").textContent = "the excerpt has fewer than two characters of the vocabulary: nothing to score";
    return;
  }
  excerptScores = scoreExcerpt((done, total) => { $("fail-summary").textContent = `scoring the excerpt: ${done} of ${total} windows…`; }).then((scores) => {
    const frag = document.createDocumentFragment();
    scores.chars.forEach((ch, k) => {
      const s = scores.losses[k];
      const span = el("span", { class: "ch fail" + (index.has(ch) ? "" : " unknown") }, ch === "\n" ? "⏎\n" : ch);
      if (s) {
        const alpha = Math.min(1, s.loss / 5);
        span.style.background = `rgba(220, 50, 47, ${alpha.toFixed(3)})`;
        span.addEventListener("mouseenter", (event) => showTip(event, ch, s));
        span.addEventListener("mouseleave", () => { $("tooltip").hidden = true; });
      }
      frag.append(span);
    });
    box.replaceChildren(frag);
    const val = payload.best_val_loss;
    $("fail-summary").textContent =
      `mean loss over the ${scores.count.toLocaleString()} predicted characters of the excerpt: ${scores.meanLoss.toFixed(4)} nats (${(scores.meanLoss / Math.LN2).toFixed(3)} bits per character)` +
      (val !== null ? `; the checkpoint's exact val loss over its whole validation split: ${val.toFixed(4)}` : "");
    return scores;
  });
}

function showTip(event, ch, s) {
  const tip = $("tooltip");
  const top = [...s.p.keys()].sort((a, b) => s.p[b] - s.p[a]).slice(0, 5);
  tip.replaceChildren(
    el("div", {}, `p(${JSON.stringify(ch)}) = ${(100 * s.p[s.target]).toFixed(2)}%, loss ${s.loss.toFixed(3)}`),
    el("div", { class: "hint" }, "the model expected: " + top.map((k) => `${JSON.stringify(model.vocab[k])} ${(100 * s.p[k]).toFixed(1)}%`).join(", "))
  );
  tip.hidden = false;
  tip.style.left = `${event.pageX + 12}px`;
  tip.style.top = `${event.pageY + 12}px`;
}

// ---------------------------------------------------------------- about the run

function drawAbout() {
  const c = payload.config;
  $("run-line").textContent = `${payload.title} · ${c.kind} · ${(payload.parameters / 1e6).toFixed(2)}M parameters · step ${payload.step}` + (payload.best_val_loss !== null ? ` · best val loss ${payload.best_val_loss.toFixed(4)}` : "");
  const table = el("table", { class: "config" });
  const rows = { ...c, parameters: payload.parameters.toLocaleString(), "optimizer steps": payload.step, "best val loss": payload.best_val_loss === null ? "not validated" : payload.best_val_loss.toFixed(4), "weights in this page": payload.weights.dtype, checkpoint: payload.checkpoint };
  for (const [k, v] of Object.entries(rows)) table.append(el("tr", {}, el("th", {}, k), el("td", {}, String(v))));
  $("about-config").replaceChildren(table);
  $("about-vocab").replaceChildren(...model.vocab.map((ch, i) => el("span", { class: "ch vocab", title: `id ${i}: ${JSON.stringify(ch)}` }, glyph(ch))));
  const h = payload.history;
  if (!h || !h.val_loss.length) {
    $("about-curve").textContent = h
      ? "The run's TensorBoard events hold no validation yet: its curve shows once one is logged."
      : "No TensorBoard events beside this checkpoint: the loss curve and samples show for a checkpoint in its run directory.";
    return;
  }
  $("about-curve").replaceChildren(lossCurve(h));
  if (h.samples.length) {
    const select = el("select", { id: "sample-step" }, ...h.samples.map(([step], k) => el("option", { value: k }, `step ${step}`)));
    const text = el("pre", { class: "sample" });
    const show = () => { text.textContent = h.samples[select.value][1]; };
    select.addEventListener("change", show);
    select.value = h.samples.length - 1;
    show();
    $("about-samples").replaceChildren(el("label", {}, "sample logged at ", select), text);
  }
}

/** The n-gram ladder of the run's text (result.json's "ngram", src/data/ngram.py): each order's val loss as a
 *  bar, its train entropy H_n as a circle, and this model's best val loss as a line across. */
function drawLadder() {
  const L = payload.ngram;
  if (!L) return;
  const ns = "http://www.w3.org/2000/svg", W = 560, H = 200, pad = 36, n = L.val.length;
  const best = payload.best_val_loss, top = Math.max(...L.val, best ?? 0) * 1.08;
  const y = (v) => H - pad + ((pad - H + 10) * v) / top, bar = (W - 2 * pad) / n;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("class", "curve"); // the loss curve's size: as wide as the screen allows
  const add = (tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
    return node;
  };
  L.val.forEach((v, k) => {
    const x = pad + k * bar, name = k === 0 ? "1" : `${k + 1}`;
    add("rect", { x: x + 4, y: y(v), width: bar - 8, height: H - pad - y(v), fill: "#9db4d8" }).append(Object.assign(document.createElementNS(ns, "title"), { textContent: `${name}-gram: val ${v.toFixed(3)}, train H_${k} ${L.train[k].toFixed(3)}` }));
    add("circle", { cx: x + bar / 2, cy: y(L.train[k]), r: 3.5, fill: "none", stroke: "#1d2330" });
    add("text", { x: x + bar / 2, y: H - pad + 14, "text-anchor": "middle", "font-size": 11 }, name);
  });
  add("text", { x: W / 2, y: H - 4, "text-anchor": "middle", "font-size": 11 }, "n (characters of context + 1)");
  if (best !== null) {
    add("line", { x1: pad, x2: W - pad, y1: y(best), y2: y(best), stroke: "#d33", "stroke-width": 2 });
    add("text", { x: W - pad, y: y(best) - 4, "text-anchor": "end", "font-size": 11, fill: "#d33" }, `this model ${best.toFixed(3)}`);
  }
  $("ladder").replaceChildren(svg, el("p", {}, L.placed ?? ""));
  $("ladder-section").hidden = false;
}

/** The val (and train) loss against the step, as an SVG. */
function lossCurve(h) {
  const W = 560, H = 220, pad = 40;
  const all = [...h.val_loss, ...h.train_loss];
  const maxStep = Math.max(...all.map((p) => p[0]), 1);
  const lo = Math.min(...all.map((p) => p[1])), hi = Math.max(...all.map((p) => p[1]));
  const x = (s) => pad + ((W - 2 * pad) * s) / maxStep;
  const y = (v) => H - pad + ((pad - (H - pad)) * (v - lo)) / (hi - lo || 1);
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("class", "curve");
  const add = (tag, attrs, text) => {
    const n = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
    if (text !== undefined) n.textContent = text;
    svg.append(n);
  };
  add("line", { x1: pad, y1: H - pad, x2: W - pad, y2: H - pad, class: "axis" });
  add("line", { x1: pad, y1: pad, x2: pad, y2: H - pad, class: "axis" });
  for (const [points, cls] of [[h.train_loss, "train"], [h.val_loss, "val"]]) {
    if (points.length) add("polyline", { points: points.map(([s, v]) => `${x(s)},${y(v)}`).join(" "), class: cls });
  }
  for (const [s, v] of h.val_loss) add("circle", { cx: x(s), cy: y(v), r: 3, class: "val" });
  add("text", { x: pad, y: pad - 10, class: "label" }, `loss (nats): val ● ${h.train_loss.length ? "and train —" : ""}`);
  add("text", { x: W - pad, y: H - 10, class: "label", "text-anchor": "end" }, `step ${maxStep}`);
  add("text", { x: pad - 4, y: y(hi) + 4, class: "label", "text-anchor": "end" }, hi.toFixed(2));
  add("text", { x: pad - 4, y: y(lo) + 4, class: "label", "text-anchor": "end" }, lo.toFixed(2));
  return svg;
}

// ---------------------------------------------------------------- controls and the test hook

function readNumber(id, parse, check) {
  const raw = $(id).value.trim();
  if (raw === "") return null;
  const v = parse(raw);
  return check(v) ? v : undefined;
}

function wireControls() {
  $("prompt").value = state.text;
  $("prompt").addEventListener("input", () => { state.written = []; state.picked = null; state.text = $("prompt").value; scheduleUpdate(); });
  const temp = () => {
    state.temperature = Number($("temperature").value);
    $("temperature-value").textContent = state.temperature.toFixed(2) + (state.temperature === 0 ? " (greedy)" : "");
    if (current) drawDistribution();
  };
  $("temperature").addEventListener("input", temp);
  for (const [id, key, parse, check] of [
    ["top-k", "topK", (s) => Number(s), (v) => Number.isInteger(v) && v >= 1],
    ["top-p", "topP", (s) => Number(s), (v) => v > 0 && v <= 1],
  ]) {
    $(id).addEventListener("input", () => {
      const v = readNumber(id, parse, check);
      $(id).classList.toggle("invalid", v === undefined);
      state[key] = v === undefined ? null : v; // an impossible value filters nothing, and the note says so
      const notes = [];
      if ($("top-k").classList.contains("invalid")) notes.push(`top-k must be a whole number ≥ 1: ${JSON.stringify($("top-k").value)} is ignored, no top-k filter applies`);
      if ($("top-p").classList.contains("invalid")) notes.push(`top-p must be a number in (0, 1]: ${JSON.stringify($("top-p").value)} is ignored, no top-p filter applies`);
      $("filter-note").textContent = notes.join("; ");
      if (current) drawDistribution();
    });
  }
  $("sample").addEventListener("click", () => write(false));
  $("argmax").addEventListener("click", () => write(true));
  $("back").addEventListener("click", stepBack);
  $("play").addEventListener("click", togglePlay);
  temp();
}

/** For tests: every step inside the model for every position of `text`'s window, as [T][n] arrays. */
function internals(text) {
  const a = analyse(text);
  if (!a.result) return null;
  const T = a.T, d = model.d;
  const rows = (A) => Array.from({ length: T }, (_, t) => Array.from(A.subarray((t * A.length) / T, ((t + 1) * A.length) / T)));
  const { tokens, positions } = embeddingParts(a.ids);
  const layers = a.result.blocks.map((b, l) => {
    const att = a.result.attention[l];
    const out = { q: rows(att.Q), k: rows(att.K), v: rows(att.V), concat: rows(att.concat) };
    for (const [k, v] of Object.entries(b)) if (v) out[k] = rows(v); // ln2, hidden, mlp: none without an MLP
    return out;
  });
  return { tokens: rows(tokens), positions: rows(positions), embedded: rows(a.result.embedded), d, layers };
}

/** For tests and other programs: the model's outputs for the last position of `text`, cropped to the window. */
function predict(text = "") {
  const a = analyse(text);
  if (!a.result) return { probs: null, attention: [], lens: [], window: "", unknown: a.unknown };
  const T = a.T;
  const attention = a.result.attention.map((att) =>
    att.heads.map((head) => Array.from({ length: T }, (_, i) => Array.from(head.weights.subarray(i * T, (i + 1) * T))))
  );
  return { probs: Array.from(a.probs), attention, lens: a.lens.map((p) => Array.from(p)), window: a.window.join(""), unknown: a.unknown };
}

window.scratchgpt = {
  vocab: model.vocab,
  config: model.config,
  predict,
  internals,
  distribution: (text = "", { temperature = 1, topK = null, topP = null } = {}) => {
    const a = analyse(text);
    return a.result ? Array.from(nextTokenDistribution(a.logits, temperature, topK, topP)) : null;
  },
  // a promise always: of null when the excerpt has nothing to score (fewer than two characters of the vocabulary)
  excerpt: () => Promise.resolve(excerptScores).then((s) => s && { meanLoss: s.meanLoss, count: s.count }),
  /** This checkpoint's head scores, computed in the page (a promise). */
  headScores: () => headsScored.then((s) => s && { scores: s.scores, kinds: s.kinds, inContext: s.inContext }),
  /** Show frame k of the time-lapse (the last: this checkpoint) and return what the view drew from. */
  timelapse: (k) => {
    state.frame = k;
    drawTimelapse();
    drawView("job-section");
    request("circuits-section");
    const frame = headFrames()[k];
    return frame ? { step: frame.step, scores: frame.scores, kinds: frame.kinds, in_context: frame.in_context, maps: frame.maps } : null;
  },
  settled: () => updated ?? Promise.resolve(), // after the update typing asked for
  /** This checkpoint's circuits computed in the page: {qk, ov: [layer][head] (V, V) as [V][V] arrays,
   *  direct (V, V) or null, positivity: {qk, ov}: [layer][head], composition: {q, k, v}: [l1][h1][l2][h2]}. */
  circuits: () => {
    const c = finalCircuits(), V = model.vocabSize;
    const square = (M) => M && Array.from({ length: V }, (_, a) => Array.from(M.subarray(a * V, (a + 1) * V)));
    return { qk: c.qk.map((l) => l.map(square)), ov: c.ov.map((l) => l.map(square)), direct: square(c.direct), positivity: c.positivity, composition: c.composition };
  },
  /** What the circuits view drew last: {step, head, qk, ov, direct (flat V x V)} or null. */
  shownCircuits: () => circuitsShown,
  /** `text`'s window with heads taken out ([[layer, head, "zero" | "mean"]]; the mean over the window's
   *  positions): {loss: the mean loss of its predictions, lossBefore, probs: the last position's}. */
  ablate: (text, heads) => {
    const a = analyse(text), L = model.config.kind === "seed" ? 1 : model.config.num_layers;
    const spec = Array.from({ length: L }, () => ({}));
    for (const [l, h, mode] of heads) spec[l][h] = mode === "mean" ? meanContext(a.result, l, h) : null;
    const after = forward(model, a.ids, spec);
    return { loss: textLoss(after, a.ids), lossBefore: textLoss(a.result, a.ids), probs: Array.from(softmax(Float64Array.from(row(after.logits, a.T - 1, model.vocabSize)))) };
  },
  /** Where matmul adds its sums: "WebAssembly SIMD" (kernel.js) or "JavaScript"; `useKernel(false)` chooses the loops. */
  kernel: kernelName,
  useKernel,
};

function drawLegends() {
  if (W_ATT) $("att-mask-hint").textContent = `Row i: the weights of query i. Masked: the future above the diagonal, and the keys older than the window w = ${W_ATT} (j ≤ i − ${W_ATT}): −∞ before the softmax, so exactly 0 after.`;
  const ramp = [0, 0.25, 0.5, 0.75, 1].map(heat);
  legend("att-legend", ramp, "weight 0", "1", [[`background:rgb(${MASKED_RGB.join(",")});border:1px solid #d0d5dd`, W_ATT ? `masked: the future, and keys outside the window (w = ${W_ATT})` : "masked future"], ["border:2px solid #d33", "the query's row"]]);
  legend("lens-legend", ramp, "p of the top character 0%", "100%", [["border:2px solid #1d2330", "it is the character that really follows"]]);
  legend("fail-legend", [0, 0.5, 1].map((a) => `rgba(220, 50, 47, ${a})`), "loss 0 nats (certain)", "≥ 5 nats", []);
}

wireControls();
describeBlock();
drawLegends();
drawAbout();
drawLadder();
update();
watchSight();
window.scratchgpt.drawn = true; // every view but "Where it fails" and the heads' scores, computed in the background
// ?report=<text>, on a page served over HTTP: post the next-character distribution for <text> back to
// the server, for a browser that no test can drive (Firefox ESR: tests/explorer/test_firefox.py). A
// form, not fetch: the page's Content-Security-Policy refuses every connection.
const reportText = new URLSearchParams(location.search).get("report");
if (reportText !== null && location.protocol.startsWith("http")) {
  const data = JSON.stringify({ probs: predict(reportText).probs, userAgent: navigator.userAgent, kernel: window.scratchgpt.kernel() });
  const form = el("form", { method: "POST", action: "/report" }, el("input", { type: "hidden", name: "data", value: data }));
  document.body.append(form);
  form.submit();
}
drawFailures();
drawTimelapse();
request("job-section");
$("circuits-section").setAttribute("data-stale", ""); // computed when first scrolled to, not before the page opens
const headsScored = payload.heads
  ? Promise.resolve(excerptScores) // after the excerpt: one background job at a time
      .then(() => scoreHeads())
      .then((scores) => { headsNow = scores; drawTimelapse(); request("job-section", "ablate-section"); return scores; })
  : Promise.resolve(null);
