// The Attention page's maps, redrawn in the browser (ui/attention_maps.py, ui/attention_view.py). Two elements share this script: the maps
// (data.role "maps": blocks of (mask set, layer), each every head's softmax weights, the kept ones to 4 decimals, the
// tiny ones with their log, and each set's mask as bits), which it keeps in MAPS for the text they are of, and the
// view, which draws the chosen head large and every head of its layer small from them. Where the maps of a layer or a
// mask are not here yet, the view asks for them (the maps element's state "want", a run of that element alone) when
// the pointer or the focus reaches its Layer list (its mask's other layers) or its mask radio (the layer under the
// other masks): a learner about to switch; a learner who never does costs no bytes. A pick made before they come
// shows the maps drawn, faded, until the run that tells the server of it brings them.
// A pick of the layer, mask, head (the list, a small map) or colour scale redraws here at once; then the view tells
// the server (the state "pick"), whose run records it in the link and redraws what depends on them. A click on a cell
// asks the server for its arithmetic (the state "cell"). A third element, the pair (data.role "pair"), draws the
// chosen head's scores before and after masking side by side.
const TELL_AFTER_MS = 120;  // a run of changes (arrow keys held on the list) is told once
const LOG_LOW = -6;  // log10 of ui.figures.LOG_FLOOR: the log scale's lowest value
const MARK_CAP = 32 * 32;  // ui.figures.MARK_CAP: maps of up to this many cells draw an ✕ on each masked one

// The maps of one text (its key): "set|layer" -> {four, log, labels}; the sets' masks; the blocks asked for and not
// come yet ("set|layer" -> the ask's time), and those an answer came without (not asked again); the maps element's
// setStateValue; the views drawn from them
const MAPS = { text: null, blocks: new Map(), masks: [], pending: new Map(), refused: new Set(), seen: null, ask: null,
               views: new Set(), pairs: new Map() };

// a self-attention map's keys are its queries: the server sends the labels once ("k": null)
const withKeys = (data) => (data.k ? data : { ...data, k: data.q });

export default function (component) {
  if (component.data.role === "maps") return receive(component);
  const data = withKeys(component.data), { parentElement, setStateValue } = component;
  if (data.role === "pair") return drawPair(data, parentElement);
  let root = parentElement.querySelector(".av");
  if (root && JSON.stringify(root.__data.text) !== JSON.stringify(data.text)) {  // another language: built afresh
    MAPS.views.delete(root);  // (its words are written once), from the link, which holds the server's picks
    root.remove();
    root = null;
  }
  root = root || build(parentElement, data);
  root.__tell = setStateValue;
  root.__maps = MAPS;  // (what the browser tests read)
  MAPS.views.add(root);
  const was = root.__data, mounted = was === undefined;
  root.__data = data;
  if (mounted || was.heads !== data.heads) fillHeads(root);
  if (mounted || was.layers !== data.layers) fillLayers(root);
  if (mounted || JSON.stringify(was.modes) !== JSON.stringify(data.modes)) fillMasks(root);
  if (mounted) {  // a new view starts from the link (the server writes the page's values in it)
    root.__serial = data.pick.serial;
    const linked = new URLSearchParams(window.location.search), p = data.pick;
    const l = Number(linked.get("layer") ?? 0), h = Number(linked.get("head") ?? 0), s = linked.get("scale") ?? "01";
    pickLayer(root, Number.isInteger(l) && l >= 0 && l < data.layers ? l : p.layer);
    pickMask(root, linked.get("mask") ?? p.mask);
    pickHead(root, Number.isInteger(h) && h >= 0 && h < data.heads ? h : p.head);
    pickScale(root, data.scales.includes(s) ? s : p.scale);
    if (layer(root) !== p.layer || mask(root) !== p.mask || head(root) !== p.head || scale(root) !== p.scale) {
      queueMicrotask(() => tell(root));
    }
  } else if (data.pick.serial !== root.__serial) {  // the server chose (a link, the model view's click)
    root.__serial = data.pick.serial;
    pickLayer(root, data.pick.layer); pickMask(root, data.pick.mask); pickHead(root, data.pick.head);
    pickScale(root, data.pick.scale);
  }
  refresh(root);
  for (const [place, d] of MAPS.pairs) if (d.from_view === data.key) drawPair(d, place);  // the pairs that waited
}

// drawn again when the column's width changes (the sidebar opened or closed, the window resized): the cells' size
// follows the room; a change of height alone (the element's own drawing) redraws nothing
function onWidth(root, redraw) {
  new ResizeObserver(() => {
    const width = root.clientWidth, was = root.__width;
    root.__width = width;
    if (was !== undefined && width && width !== was) redraw();
  }).observe(root);
}

function refresh(root) {  // after new data or new maps
  showable(root);
  draw(root);
  root.toggleAttribute("data-asking", ours(root) && MAPS.pending.size > 0);  // asked, not answered (the tests)
}

// ui.attention_maps.encode: one uint16 per kept cell, high bytes then low bytes; a code over 10,000 is a weight under
// 0.0095 (10,001 + its 4 decimals * 256 + its log code). Every cell's weight to 4 decimals (0 where masked) and its log
// code in 255 steps from -6 to 0 (a larger weight's from its 4 decimals). One encoding per block, with its set's mask.
const TINY_BASE = 10_001;  // ui.attention_maps.TINY_BASE
function receive({ data, setStateValue }) {
  MAPS.ask = setStateValue;
  if (MAPS.text !== data.key) {  // another text: its maps start again
    Object.assign(MAPS, { text: data.key, blocks: new Map(), pending: new Map(), refused: new Set(), seen: null });
  }
  const seen = `${data.weights}|${data.blocks.join(";")}|${data.answered}`;
  if (MAPS.seen !== seen) decode(data);  // (a run that only re-sends the element keeps what it decoded)
  MAPS.seen = seen;
  for (const root of MAPS.views) {
    if (!root.isConnected) { MAPS.views.delete(root); continue; }
    refresh(root);
    // a run is over and the maps shown are not here: the server's pick (a link) is in this run's, so these were lost
    // on the way (a dropped connection): ask
    if (ours(root) && !held(root)) want(root, [[set(root), layer(root)]]);
  }
}

function decode(data) {
  const n = data.n_q * data.n_k, cells = data.heads * n;
  MAPS.masks = data.masks.map((m) => bits(m, n));
  const planes = typed(data.weights, Uint8Array);
  let start = 0;
  data.blocks.forEach(([s, l], b) => {
    const mask = MAPS.masks[s], kept = data.heads * mask.reduce((a, v) => a + v, 0);
    const four = new Uint16Array(cells), log = new Uint8Array(cells);
    for (let i = 0, j = 0; i < cells; i++) {
      if (!mask[i % n]) continue;
      const code = (planes[start + j] << 8) | planes[start + kept + j];
      j++;
      if (code >= TINY_BASE) {
        four[i] = (code - TINY_BASE) >> 8;
        log[i] = (code - TINY_BASE) & 255;
      } else {
        four[i] = code;
        log[i] = Math.round(((Math.log10(code / 1e4) - LOG_LOW) / -LOG_LOW) * 255);
      }
    }
    start += 2 * kept;
    MAPS.blocks.set(`${s}|${l}`, { four, log, labels: data.labels[b] });
    MAPS.pending.delete(`${s}|${l}`);
  });
  for (const [block, at] of MAPS.pending) {  // asked and answered without them (a server short of memory)
    if (data.answered !== null && at <= data.answered) {
      MAPS.pending.delete(block);
      MAPS.refused.add(block);
    }
  }
}

function ours(root) { return MAPS.text === root.__data.key && MAPS.ask !== null; }  // the maps are of this text

function want(root, blocks) {  // ask for the blocks not here nor asked, as many as one ask brings (data.cap cells)
  const d = root.__data;
  if (!ours(root)) return;
  let total = 0;
  const asked = [];
  for (const [s, l] of blocks) {
    const name = `${s}|${l}`, cells = d.heads * MAPS.masks[s].reduce((a, v) => a + v, 0);
    const askedBefore = MAPS.pending.has(name) || MAPS.refused.has(name);
    if (MAPS.blocks.has(name) || askedBefore || total + cells > d.cap) continue;
    total += cells;
    asked.push([s, l]);
  }
  if (!asked.length) return;
  const at = Date.now();
  for (const [s, l] of asked) MAPS.pending.set(`${s}|${l}`, at);
  root.setAttribute("data-asking", "");
  MAPS.ask("want", { key: d.key, blocks: asked, at });
}

function nearest(l, n) {  // ui.attention_maps.nearest: the layers from l outwards
  return Array.from({ length: n }, (_, i) => i).sort((a, b) => Math.abs(a - l) - Math.abs(b - l) || a - b);
}

function wantLayers(root) {  // the pointer or the focus on the Layer list: the mask shown's other layers
  const m = set(root);
  want(root, nearest(layer(root), root.__data.layers).map((l) => [m, l]));
}

function wantMasks(root) {  // ... on the mask radio: the layer shown under the other masks
  const sets = [...new Set(Object.values(root.__data.modes))];
  want(root, sets.map((m) => [m, layer(root)]));
}

function showable(root) {  // the thumbnails of the layer shown; where the kind filter hid the head, its first shown
  if (!held(root)) return;
  const shown = shownHeads(root);
  buildThumbs(root);
  if (shown.length && !shown.includes(head(root))) {
    pickHead(root, shown[0]);
    tell(root);
  }
}

function bits(b64, n) {  // numpy.packbits(..., bitorder="little"): 1 = the key is kept
  const bin = atob(b64), out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = (bin.charCodeAt(i >> 3) >> (i & 7)) & 1;
  return out;
}

function build(parent, d) {
  const root = el("div", { class: "av" });
  const controls = el("div", { class: "controls" });
  const layerBox = el("label", { class: "field layer" }, d.text.layer);
  layerBox.append(el("select", { name: "layer", "aria-label": d.text.layer }));
  const headBox = el("label", { class: "field" }, d.text.head);
  const select = el("select", { name: "head", "aria-label": d.text.head });
  headBox.append(select);
  const scales = el("div", { class: "field scale", role: "radiogroup", "aria-label": d.text.scale });
  const legend = el("span", { class: "legend" }, d.text.scale);
  legend.append(el("span", { class: "help", title: d.text.scale_help, "aria-hidden": "true" }, "?"));
  scales.append(legend);
  const options = el("div", { class: "options" });
  for (const s of d.scales) {
    const opt = el("label", { class: "option" });
    opt.append(el("input", { type: "radio", name: "scale", value: s }), el("span", {}, d.text.scale_names[s]));
    options.append(opt);
  }
  scales.append(options);
  const masks = el("div", { class: "field mask", role: "radiogroup", "aria-label": d.text.mask });
  masks.append(el("span", { class: "legend" }, d.text.mask), el("div", { class: "options" }));
  controls.append(layerBox, masks, headBox, scales);
  const map = el("div", { class: "map" });
  map.append(el("div", { class: "ylab" }), el("canvas", { class: "cells" }), el("div", { class: "bar" }),
             el("div", { class: "corner" }), el("div", { class: "xlab" }));
  const picture = el("button", { type: "button", class: "download chart" });
  picture.addEventListener("click", () => saveChart(root, root.__data.q, root.__data.k, root.__data.chart));
  root.append(controls, el("h4", { class: "title" }), el("div", { class: "axis-names" }), map,
              el("div", { class: "tip", role: "tooltip", hidden: "" }), el("p", { class: "hint main" }), picture,
              el("h4", { class: "grid-title" }), el("div", { class: "thumbs" }),
              el("p", { class: "hint thumbs-hint" }));
  parent.append(root);
  onWidth(root, () => draw(root));
  select.addEventListener("change", () => { draw(root); tell(root); });
  layerBox.querySelector("select").addEventListener("change", () => { refresh(root); tell(root); });
  layerBox.addEventListener("pointerenter", () => wantLayers(root));  // about to pick a layer: fetch them
  layerBox.querySelector("select").addEventListener("focus", () => wantLayers(root));
  masks.addEventListener("pointerenter", () => wantMasks(root));  // about to pick a mask
  masks.addEventListener("focusin", () => wantMasks(root));
  for (const r of options.querySelectorAll("input")) r.addEventListener("change", () => { draw(root); tell(root); });
  const canvas = map.querySelector("canvas.cells");
  canvas.addEventListener("mousemove", (e) => hover(root, e));
  canvas.addEventListener("mouseleave", () => { root.querySelector(".tip").hidden = true; });
  canvas.addEventListener("click", (e) => {
    const cell = held(root) && cellAt(root, e);
    if (!cell) return;
    clearTimeout(root.__told);  // the cell's message carries the head and scale too
    root.__cell = { layer: layer(root), mask: mask(root), head: head(root), q: cell.q, k: cell.k };
    draw(root);
    root.__tell("cell", { ...root.__cell, scale: scale(root) });
  });
  return root;
}

function fillHeads(root) {
  const d = root.__data, select = root.querySelector("select[name='head']"), was = select.value;
  select.replaceChildren(...Array.from({ length: d.heads }, (_, h) => el("option", { value: h }, String(h))));
  select.value = was !== "" && Number(was) < d.heads ? was : "0";
}

function fillLayers(root) {  // the layers' list (none for a model of one layer)
  const d = root.__data, select = root.querySelector("select[name='layer']"), was = select.value;
  select.replaceChildren(...Array.from({ length: d.layers }, (_, l) => el("option", { value: l }, String(l))));
  select.value = was !== "" && Number(was) < d.layers ? was : String(d.pick.layer);
  root.querySelector(".field.layer").hidden = d.layers < 2;
}

function fillMasks(root) {  // the mask modes' radio
  const d = root.__data, box = root.querySelector(".field.mask"), was = mask(root);
  box.querySelector(".options").replaceChildren(...Object.keys(d.modes).map((m) => {
    const opt = el("label", { class: "option" }), input = el("input", { type: "radio", name: "mask", value: m });
    input.addEventListener("change", () => { refresh(root); tell(root); });
    opt.append(input, el("span", {}, d.text.mask_names[m]));
    return opt;
  }));
  pickMask(root, was in d.modes ? was : d.pick.mask);
}

function mask(root) {  // the mask mode shown (the radio's, else the server's)
  const d = root.__data, m = root.querySelector("input[name='mask']:checked")?.value;
  return m in d.modes ? m : d.pick.mask;
}
function set(root) { return root.__data.modes[mask(root)]; }  // its maps' set
function pickMask(root, m) {
  for (const r of root.querySelectorAll("input[name='mask']")) r.checked = r.value === m;
}

function layer(root) {
  const d = root.__data, l = Number(root.querySelector("select[name='layer']").value);
  return Number.isInteger(l) && l >= 0 && l < d.layers ? l : d.pick.layer;
}
function held(root) {  // whether the maps of the layer and mask shown are here (else on their way)
  return ours(root) && MAPS.blocks.has(`${set(root)}|${layer(root)}`);
}
function shownHeads(root) {  // the heads shown small: the kind filter's for the server's block, else every head
  const d = root.__data, all = Array.from({ length: d.heads }, (_, h) => h);
  return d.shown && d.shown.set === set(root) && d.shown.layer === layer(root) ? d.shown.heads : all;
}
function pickLayer(root, l) { if (l >= 0 && l < root.__data.layers) root.querySelector("select[name='layer']").value = l; }
function head(root) { return Number(root.querySelector("select[name='head']").value); }
function scale(root) { return root.querySelector("input[name='scale']:checked")?.value ?? "01"; }
function pickHead(root, h) { root.querySelector("select[name='head']").value = String(h); }
function pickScale(root, s) {
  for (const r of root.querySelectorAll("input[name='scale']")) r.checked = r.value === s;
}

function tell(root) {  // the pick reaches the server after the last of a run of changes
  root.__cell = null;  // a cell belongs to the head it was clicked on
  clearTimeout(root.__told);
  root.__told = setTimeout(() => root.__tell("pick", { layer: layer(root), mask: mask(root), head: head(root),
                                                      scale: scale(root) }), TELL_AFTER_MS);
}

// The values the colours stand for, as ui.figures.scaled_weights gives them to the server's charts: the weight
// (0 – 1), the weight over its row's largest kept weight (per row), or log10 of the weight floored at 1e-6 (log);
// NaN where the key is masked. From the weights as `weights` decodes them: to 4 decimals, and their log in 255 steps.
export function values(four, log, mask, nq, nk, scale) {
  const z = new Float64Array(nq * nk);
  for (let q = 0; q < nq; q++) {
    let top = 0;
    for (let k = 0; k < nk; k++) if (mask[q * nk + k]) top = Math.max(top, four[q * nk + k]);
    for (let k = 0; k < nk; k++) {
      const i = q * nk + k;
      if (!mask[i]) z[i] = NaN;
      else if (scale === "row") z[i] = top > 0 ? four[i] / top : 0;
      else if (scale === "log") z[i] = (log[i] / 255) * -LOG_LOW + LOG_LOW;
      else z[i] = four[i] / 1e4;
    }
  }
  return z;
}

function range(scale) { return scale === "log" ? [LOG_LOW, 0] : [0, 1]; }

function headMaps(root, h) {  // (weights to 4 decimals, their log, mask) of head h of the layer and mask shown: views
  const d = root.__data, n = d.n_q * d.n_k, maps = MAPS.blocks.get(`${set(root)}|${layer(root)}`);
  const part = (a, j) => a.subarray(j * n, (j + 1) * n);
  return [part(maps.four, h), part(maps.log, h), MAPS.masks[set(root)]];
}

function rgb(hex) { return [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)); }

function colour(stops, t) {  // plotly's colour scale: evenly spaced stops, linear in RGB between them
  const x = Math.min(Math.max(t, 0), 1) * (stops.length - 1), i = Math.min(Math.floor(x), stops.length - 2);
  const a = stops[i], b = stops[i + 1], f = x - i;
  return `rgb(${a.map((v, j) => Math.round(v + (b[j] - v) * f)).join(",")})`;
}

function paint(canvas, z, nq, nk, cw, ch, lo, hi, d, marks) {
  const stops = d.colours.scale.map(rgb), dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(nk * cw * dpr); canvas.height = Math.round(nq * ch * dpr);
  canvas.style.width = `${nk * cw}px`; canvas.style.height = `${nq * ch}px`;
  const g = canvas.getContext("2d"), at = (i, size) => Math.round(i * size * dpr);
  g.setTransform(1, 0, 0, 1, 0, 0);  // each cell from one whole device pixel to another: no seams between cells
  g.clearRect(0, 0, canvas.width, canvas.height);
  for (let q = 0; q < nq; q++) {
    for (let k = 0; k < nk; k++) {
      const v = z[q * nk + k];
      g.fillStyle = Number.isNaN(v) ? d.colours.masked : colour(stops, (v - lo) / (hi - lo));
      g.fillRect(at(k, cw), at(q, ch), at(k + 1, cw) - at(k, cw), at(q + 1, ch) - at(q, ch));
    }
  }
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  if (marks) {  // an ✕ on each masked cell of a small map, as the server's charts mark them
    g.strokeStyle = d.colours.mark; g.lineWidth = 1;
    for (let q = 0; q < nq; q++) {
      for (let k = 0; k < nk; k++) {
        if (!Number.isNaN(z[q * nk + k])) continue;
        const x = k * cw + cw / 2, y = q * ch + ch / 2, r = Math.min(cw, ch) * 0.22;
        g.beginPath(); g.moveTo(x - r, y - r); g.lineTo(x + r, y + r); g.moveTo(x + r, y - r); g.lineTo(x - r, y + r);
        g.stroke();
      }
    }
  }
  return g;
}

function sizes(root) {  // cell width and height (px): the map fills the column, rows tall enough for a label
  const d = root.__data, room = Math.max(240, (root.clientWidth || 700) - root.__ylabWidth - 90);
  const cw = Math.max(6, Math.min(40, Math.floor(room / d.n_k)));
  return [cw, Math.max(cw, 18)];
}

function fontFor(px) { return Math.max(7, Math.min(13, px - 2)); }

function draw(root) {
  root.style.setProperty("--av-paper", paper());  // the hover box's background
  const d = root.__data, h = head(root), s = scale(root), [lo, hi] = range(s);
  root.classList.toggle("waiting", !held(root));
  if (!held(root)) {  // the maps drawn stay, faded, under a title that says the layer's are on their way
    root.querySelector(".title").textContent = d.text.asking.replace("{layer}", layer(root));
    root.querySelector(".tip").hidden = true;
    return;
  }
  const z = values(...headMaps(root, h), d.n_q, d.n_k, s);
  root.__z = z;
  root.querySelector(".title").textContent = d.text.title.replace("{layer}", layer(root)).replace("{head}", h)
    .replace("{scale}", d.text.scale_names[s]);
  root.querySelector(".axis-names").textContent = `↓ ${d.text.queries} · → ${d.text.keys}`;
  const ylab = root.querySelector(".ylab"), xlab = root.querySelector(".xlab");
  if (ylab.childElementCount !== d.n_q || root.__labelsFor !== d.key) {
    ylab.replaceChildren(...d.q.map((t) => el("div", {}, t)));
    xlab.replaceChildren(...d.k.map((t) => el("div", {}, t)));
    root.__labelsFor = d.key;
  }
  root.__ylabWidth = ylab.getBoundingClientRect().width || 120;
  const [cw, ch] = sizes(root);
  root.__cw = cw; root.__ch = ch;
  ylab.style.setProperty("--row", `${ch}px`); ylab.style.fontSize = `${fontFor(ch)}px`;
  xlab.style.setProperty("--col", `${cw}px`); xlab.style.fontSize = `${fontFor(cw + 2)}px`;
  const canvas = root.querySelector("canvas.cells");
  const g = paint(canvas, z, d.n_q, d.n_k, cw, ch, lo, hi, d, d.n_q * d.n_k <= MARK_CAP);
  if (d.gen > 0 && d.gen < d.n_q) {  // generated rows: a dashed line above the first, the newest row outlined
    g.strokeStyle = "#d62728"; g.lineWidth = 2; g.setLineDash([6, 4]);
    g.beginPath(); g.moveTo(0, (d.n_q - d.gen) * ch); g.lineTo(d.n_k * cw, (d.n_q - d.gen) * ch); g.stroke();
    g.setLineDash([]); g.lineWidth = 3; g.strokeRect(1.5, (d.n_q - 1) * ch + 1.5, d.n_k * cw - 3, ch - 3);
  }
  const c = root.__cell;
  if (c && c.head === h && c.layer === layer(root) && c.mask === mask(root)) {  // the clicked cell, outlined
    g.strokeStyle = "#d62728"; g.lineWidth = 2; g.strokeRect(c.k * cw + 1, c.q * ch + 1, cw - 2, ch - 2);
  }
  drawBar(root.querySelector(".bar"), d.colours.scale, lo, hi, s === "log" ? [-6, -4, -2, 0] : [0, 0.25, 0.5, 0.75, 1],
          (v) => (s === "log" ? `1e${v}` : String(v)), d.n_q * ch);
  root.querySelector(".hint.main").textContent = d.text.click_hint;
  root.querySelector("button.chart").textContent = d.text.download_chart;
  root.querySelector(".grid-title").textContent = d.text.grid;
  root.querySelector(".thumbs-hint").textContent = d.text.thumbs_hint;
  drawThumbs(root, s);
}

function drawBar(box, stops, lo, hi, ticks, label, height) {  // a colour bar: lo at the bottom, hi at the top
  const grad = el("div", { class: "grad" });
  grad.style.height = `${Math.min(height, 360)}px`;
  grad.style.background = `linear-gradient(to top, ${stops.join(", ")})`;
  const labels = el("div", { class: "ticks" });
  labels.style.height = grad.style.height;
  for (const v of ticks) {
    const t = el("span", {}, label(v));
    t.style.bottom = `${((v - lo) / (hi - lo)) * 100}%`;
    labels.append(t);
  }
  box.replaceChildren(grad, labels);
}

function buildThumbs(root) {
  const d = root.__data, box = root.querySelector(".thumbs"), m = set(root), l = layer(root);
  const labels = MAPS.blocks.get(`${m}|${l}`).labels, shown = shownHeads(root);
  const key = `${d.key}|${m}|${l}|${shown.join(",")}|${labels.join("/")}`;
  if (box.__for === key) return;
  box.__for = key;
  box.replaceChildren(...shown.map((h) => {
    const fig = el("figure", { class: "thumb", "data-head": h, tabindex: "0", role: "button" });
    const cap = el("figcaption");
    cap.append(el("span", { class: "name" }, `${d.text.head} ${h}`), el("span", { class: "kind" }, labels[h]));
    fig.append(cap, el("canvas"));
    const choose = () => { pickHead(root, h); draw(root); tell(root); };
    fig.addEventListener("click", choose);
    fig.addEventListener("keydown", (e) => {
      if (e.key === "Enter" || e.key === " ") { e.preventDefault(); choose(); }
    });
    return fig;
  }));
}

function drawThumbs(root, s) {
  const d = root.__data, [lo, hi] = range(s), chosen = head(root);
  const px = Math.max(1, Math.floor(120 / Math.max(d.n_q, d.n_k)));
  for (const fig of root.querySelectorAll(".thumbs figure")) {
    const h = Number(fig.dataset.head);
    fig.classList.toggle("chosen", h === chosen);
    fig.setAttribute("aria-pressed", String(h === chosen));
    paint(fig.querySelector("canvas"), values(...headMaps(root, h), d.n_q, d.n_k, s), d.n_q, d.n_k, px, px, lo, hi, d,
          false);
  }
}

function cellAt(root, e) {
  const d = root.__data, r = e.currentTarget.getBoundingClientRect();
  const k = Math.floor((e.clientX - r.left) / root.__cw), q = Math.floor((e.clientY - r.top) / root.__ch);
  return q >= 0 && q < d.n_q && k >= 0 && k < d.n_k ? { q, k } : null;
}

function hover(root, e) {
  const d = root.__data, tip = root.querySelector(".tip"), cell = held(root) && cellAt(root, e);
  if (!cell) { tip.hidden = true; return; }
  const [four, , mask] = headMaps(root, head(root)), i = cell.q * d.n_k + cell.k;
  const lines = [`${d.text.queries}: ${d.q[cell.q]}`, `${d.text.keys}: ${d.k[cell.k]}`,
                 mask[i] ? `${d.text.weight} = ${(four[i] / 1e4).toFixed(4)}` : `${d.text.masked} → 0`];
  tip.replaceChildren(...lines.map((t) => el("div", {}, t)));
  tip.hidden = false;
  const box = root.getBoundingClientRect();
  tip.style.left = `${e.clientX - box.left + 14}px`; tip.style.top = `${e.clientY - box.top + 14}px`;
}

// A drawn map (`box`: its title, canvas.cells, row and column labels, and the cell size drawn: __cw, __ch,
// __ylabWidth; every __every-th column and __everyRow-th row labelled) as the other charts' camera saves them: PNG
// (twice the size) or SVG.
function saveChart(box, q, k, chart) {
  const cells = box.querySelector("canvas.cells"), ylab = box.querySelector(".ylab"), every = box.__every || 1;
  const everyRow = box.__everyRow || 1;
  const cw = box.__cw, ch = box.__ch, left = Math.ceil(box.__ylabWidth) + 8, top = 30;
  const bottom = Math.ceil(box.querySelector(".xlab").getBoundingClientRect().height) + 8;
  const w = left + k.length * cw + 20, h = top + q.length * ch + bottom;
  const css = getComputedStyle(box), bg = paper();
  const esc = (t) => t.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  const yf = parseFloat(ylab.style.fontSize), xf = parseFloat(box.querySelector(".xlab").style.fontSize);
  const parts = [`<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" style="background:${bg}">`,
    `<rect width="${w}" height="${h}" fill="${bg}"/>`,
    `<text x="0" y="18" font-size="15" font-weight="600" fill="${css.color}">`
      + `${esc(box.querySelector(".title").textContent)}</text>`,
    `<image x="${left}" y="${top}" width="${k.length * cw}" height="${q.length * ch}" `
      + `href="${cells.toDataURL("image/png")}"/>`];
  q.forEach((t, i) => i % everyRow || parts.push(`<text x="${left - 4}" y="${top + i * ch + ch / 2 + yf / 3}" text-anchor="end" `
    + `font-size="${yf}" fill="${css.color}">${esc(t)}</text>`));
  const below = top + q.length * ch + 4;
  k.forEach((t, i) => i % every || parts.push(`<text transform="translate(${left + i * cw + cw / 2 + xf / 3},${below}) `
    + `rotate(90)" font-size="${xf}" fill="${css.color}">${esc(t)}</text>`));
  parts.push("</svg>");
  savePicture(parts.join(""), w, h, chart);
}

// The pair (ui/attention_pair.py): one head's scaled scores q·k/√d_k before masking and after it, side by side on one
// colour scale (±the largest |score|, 0 in the middle), the masked cells grey after masking (an ✕ on a small map's).
// The scores come once, as 4 planes of the bytes of int32 10⁴ × each score to 4 decimals; the mask as bits.
function drawPair(data, parentElement) {
  if (data.from_view) {  // the map the view draws: its labels are the view's (sent once), drawn once the view has them
    const view = [...MAPS.views].find((v) => v.isConnected && v.__data.key === data.from_view);
    if (!view) return MAPS.pairs.set(parentElement, data);
    MAPS.pairs.delete(parentElement);
    data = { ...data, q: view.__data.q, k: view.__data.k };
  }
  const root = parentElement.querySelector(".ap") || buildPair(parentElement, data), was = root.__data;
  if (!was || was.scores !== data.scores || was.mask !== data.mask) root.__z = pairValues(data);
  root.__data = data;
  root.style.setProperty("--av-paper", paper());
  const d = data, panels = root.querySelectorAll(".panel");
  const ticks = niceTicks(d.lim), room = Math.max(240, ((root.clientWidth || 700) - 24) / 2);
  // rows 12 px up to 72 tokens, else the map about 860 px tall; every `everyRow`-th query labelled where rows are
  // thinner than a label, every `every`-th key likewise
  const rowsAt = d.n_q <= 72 ? 12 : Math.max(1, 860 / d.n_q), yFont = fontFor(Math.max(rowsAt, 10));
  const everyRow = Math.ceil((yFont + 2) / rowsAt);
  panels.forEach((panel) => {
    const ylab = panel.querySelector(".ylab");
    if (panel.__labelsFor !== `${d.scores}|${everyRow}`) {
      ylab.replaceChildren(...d.q.filter((_, i) => i % everyRow === 0).map((t) => el("div", {}, t)));
      panel.__labelsFor = `${d.scores}|${everyRow}`;
    }
    ylab.style.fontSize = `${yFont}px`;
  });
  const widest = () => Math.max(...[...panels].map((p) => p.querySelector(".ylab").getBoundingClientRect().width || 100));
  let ylabWidth = widest(), size, rows;
  for (let pass = 0; pass < 2; pass++) {  // the labels measured again in the font of rows taller than the base
    const fit = (room - ylabWidth - 70) / d.n_k;  // a map wider than half the room wraps below the other
    size = fit >= 2 ? Math.min(40, Math.floor(fit)) : Math.max(1, fit);
    rows = Math.max(size, rowsAt);
    if (pass || fontFor(Math.max(rows, 10)) <= yFont) break;
    panels.forEach((p) => { p.querySelector(".ylab").style.fontSize = `${fontFor(Math.max(rows, 10))}px`; });
    ylabWidth = widest();
  }
  const font = fontFor(size + 2), every = Math.ceil((font + 1) / size);
  panels.forEach((panel) => {
    const key = panel.dataset.key, z = root.__z[key];
    Object.assign(panel, { __cw: size, __ch: rows, __ylabWidth: ylabWidth, __every: every, __everyRow: everyRow });
    panel.querySelector(".title").textContent = d.text[key];
    const ylab = panel.querySelector(".ylab"), xlab = panel.querySelector(".xlab");
    // each label a line of its font's height, moved to the middle of its first row (rows thinner than a label)
    const label = fontFor(Math.max(rows, 10)) + 2;
    ylab.style.setProperty("--row", `${rows * everyRow}px`); ylab.style.setProperty("--line", `${label}px`);
    ylab.style.setProperty("--shift", `${(rows - label) / 2}px`); ylab.style.fontSize = `${label - 2}px`;
    ylab.style.minWidth = `${ylabWidth}px`;
    // every `every`-th key labelled, its label as wide as the columns up to the next (a label a column wide would be cut)
    xlab.replaceChildren(...d.k.filter((_, i) => i % every === 0).map((t) => el("div", {}, t)));
    xlab.style.setProperty("--col", `${size * every}px`); xlab.style.setProperty("--line", `${size}px`);
    xlab.style.fontSize = `${font}px`;
    paint(panel.querySelector("canvas.cells"), z, d.n_q, d.n_k, size, rows, -d.lim, d.lim, d, d.marks);
    drawBar(panel.querySelector(".bar"), d.colours.scale, -d.lim, d.lim, ticks, (v) => String(v), d.n_q * rows);
    panel.querySelector("button.chart").textContent = d.text.download_chart;
  });
}

const NOT_A_NUMBER = -(2 ** 31);  // ui.attention_pair.NOT_A_NUMBER: a score that is no number
function pairValues(d) {  // {before, after (NaN where masked), kept} from the planes and the mask's bits
  const n = d.n_q * d.n_k, p = typed(d.scores, Uint8Array), kept = bits(d.mask, n);
  const before = new Float64Array(n), after = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const code = p[i] | (p[n + i] << 8) | (p[2 * n + i] << 16) | (p[3 * n + i] << 24);
    before[i] = code === NOT_A_NUMBER ? NaN : code / 1e4;
    after[i] = kept[i] ? before[i] : NaN;
  }
  return { before, after, kept };
}

function niceTicks(lim) {  // ticks at a round step (1, 2 or 5 × 10^k) from -lim to lim, about five of them
  const raw = lim / 2, mag = 10 ** Math.floor(Math.log10(raw)), f = raw / mag;
  const step = (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag, n = Math.floor(lim / step + 1e-9);
  return Array.from({ length: 2 * n + 1 }, (_, i) => Number(((i - n) * step).toPrecision(6)));
}

function buildPair(parent, d) {
  const root = el("div", { class: "ap" }), row = el("div", { class: "pair" });
  for (const key of ["before", "after"]) {
    const panel = el("div", { class: "panel", "data-key": key }), map = el("div", { class: "map" });
    map.append(el("div", { class: "ylab" }), el("canvas", { class: "cells" }), el("div", { class: "bar" }),
               el("div", { class: "corner" }), el("div", { class: "xlab" }));
    const picture = el("button", { type: "button", class: "download chart" });
    picture.addEventListener("click", () => saveChart(panel, root.__data.q, root.__data.k, root.__data.chart[key]));
    panel.append(el("h4", { class: "title" }), map, picture);
    const canvas = map.querySelector("canvas");
    canvas.addEventListener("mousemove", (e) => pairHover(root, panel, e));
    canvas.addEventListener("mouseleave", () => { root.querySelector(".tip").hidden = true; });
    row.append(panel);
  }
  root.append(row, el("div", { class: "tip", role: "tooltip", hidden: "" }));
  parent.append(root);
  onWidth(root, () => drawPair(root.__data, parent));
  return root;
}

function pairHover(root, panel, e) {
  const d = root.__data, tip = root.querySelector(".tip"), r = e.currentTarget.getBoundingClientRect();
  const k = Math.floor((e.clientX - r.left) / panel.__cw), q = Math.floor((e.clientY - r.top) / panel.__ch);
  if (q < 0 || q >= d.n_q || k < 0 || k >= d.n_k) { tip.hidden = true; return; }
  const i = q * d.n_k + k, v = root.__z.before[i], masked = panel.dataset.key === "after" && !root.__z.kept[i];
  const lines = [`${d.text.queries}: ${d.q[q]}`, `${d.text.keys}: ${d.k[k]}`,
                 masked ? d.text.masked : Number.isNaN(v) ? "NaN" : v.toFixed(4)];
  tip.replaceChildren(...lines.map((t) => el("div", {}, t)));
  tip.hidden = false;
  const box = root.getBoundingClientRect();
  tip.style.left = `${e.clientX - box.left + 14}px`; tip.style.top = `${e.clientY - box.top + 14}px`;
}
