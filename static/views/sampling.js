// The Logits page's sampling view, redrawn in the browser: temperature, top-k and top-p over the chosen position's
// logits (every one of the vocabulary, sent once as float32), with the same rule as
// transformer_core.analysis.next_token (next_token_probs picks the kept tokens, distribution() their float64
// softmax). A change redraws here at once; then the view tells the server its values (the state "rule"), whose short
// run records them in the link and keeps them for "Next token" (ui/sampling_view.py). A new view starts from the link.
const TELL_AFTER_MS = 120;  // a run of changes (a held arrow key) is told once

export default function (component) {
  const { data, parentElement, setStateValue } = component;
  let root = parentElement.querySelector(".sv");
  const words = (d) => JSON.stringify([d.text, d.help]);
  if (root && words(root.__data) !== words(data)) {  // another language: built afresh (its words are written once),
    root.remove();  // from the link, which holds the server's values
    root = null;
  }
  root = root || build(parentElement, data);
  root.__data = data;
  root.__tell = setStateValue;
  if (root.__rowText !== data.row) {  // decoded once per row (a run that only re-sends the view keeps it)
    root.__row = typed(data.row, Float32Array);
    root.__rowText = data.row;
  }
  input(root, "k").max = data.vocab;
  draw(root);
}

function build(parent, d) {
  const root = el("div", { class: "sv" });
  const controls = el("div", { class: "controls" });
  const field = (name, attrs, label) => {
    const id = "sv-" + name;
    const box = el("div", { class: "field" });
    const head = el("label", { for: id }, label);
    head.append(el("span", { class: "help", title: d.help[name], "aria-hidden": "true" }, "?"));
    box.append(head, el("input", { id, name, "aria-label": label, title: d.help[name], ...attrs }));
    if (attrs.type === "range") box.append(el("output", { for: id, class: "value" }));
    controls.append(box);
  };
  const range = (name) => { const [, min, max, step] = d.ranges[name]; return { type: "range", min, max, step }; };
  field("T", range("T"), d.text.temperature);
  field("k", { type: "number", min: 0, max: d.vocab, step: 1 }, d.text.topk);
  field("p", range("p"), d.text.topp);
  const metrics = el("div", { class: "metrics" });
  for (const m of ["entropy", "sum", "kept"]) {
    const box = el("div", { class: "metric", "data-metric": m });
    box.append(el("div", { class: "mlabel" }, d.text[m]), el("div", { class: "mvalue" }));
    metrics.append(box);
  }
  const download = el("button", { type: "button", class: "download csv" }, d.text.download);
  download.addEventListener("click", () => saveCsv(root));
  const picture = el("button", { type: "button", class: "download chart" });
  picture.addEventListener("click", () => saveChart(root));
  root.append(el("div", { class: "look", role: "note" }), controls, metrics, el("div", { class: "bars" }), picture,
              el("h4", {}, d.text.table), el("table", { class: "top" }), download);
  parent.append(root);
  const linked = new URLSearchParams(window.location.search);  // the server writes the page's values in the link
  const asked = [linked.get("T") ?? d.ranges.T[0], linked.get("k") ?? 0, linked.get("p") ?? d.ranges.p[0]]
    .map(Number);
  set(root, ...asked);
  const shown = rule(root, d);  // a range snaps to its steps: the server is told a value it does not hold
  set(root, shown.T, shown.k, shown.p);
  for (const box of controls.querySelectorAll("input")) {
    box.addEventListener("input", () => draw(root));
    box.addEventListener("change", () => tell(root));
  }
  if ([shown.T, shown.k, shown.p].some((v, i) => v !== asked[i])) queueMicrotask(() => tell(root));
  return root;
}

function tell(root) {  // the values reach the server after the last of a run of changes
  clearTimeout(root.__told);
  root.__told = setTimeout(() => root.__tell("rule", rule(root)), TELL_AFTER_MS);
}

function input(root, name) { return root.querySelector(`input[name='${name}']`); }

function set(root, T, k, p) {
  input(root, "T").value = T; input(root, "k").value = k; input(root, "p").value = p;
}

function rule(root, d = root.__data) {  // the controls' values, clamped as the page clamps them (pages/5_logits.py)
  const num = (n, [dflt, lo, hi]) => {
    const v = Number(input(root, n).value);
    return Number.isFinite(v) ? Math.min(Math.max(v, lo), hi) : dflt;
  };
  return { T: num("T", d.ranges.T), k: Math.round(num("k", [0, 0, d.vocab])), p: num("p", d.ranges.p) };
}

// The kept tokens, as next_token_probs picks them: z = logit / T in float32 (the banned at -inf), top-k keeps z at or
// above the k-th largest, a float32 softmax (a token whose probability underflows to 0 there is not kept), top-p
// keeps the sorted prefix whose mass before each token is below p. Then distribution(): a float64 softmax of logit / T
// over the kept tokens.
export function sample(row, banned, T, k, p) {
  const n = row.length, z = new Float32Array(n);
  for (let i = 0; i < n; i++) z[i] = Math.fround(row[i] / T);
  for (const b of banned) z[b] = -Infinity;
  const order = Array.from(z.keys()).sort((a, b) => z[b] - z[a]);
  const kth = k > 0 ? z[order[Math.min(k, n) - 1]] : -Infinity;
  const keep = new Uint8Array(n), q = new Float32Array(n);
  let m32 = -Infinity, total32 = 0;
  for (let i = 0; i < n; i++) if (z[i] >= kth && z[i] > -Infinity) { keep[i] = 1; m32 = Math.max(m32, z[i]); }
  for (let i = 0; i < n; i++) if (keep[i]) { q[i] = Math.fround(Math.exp(z[i] - m32)); total32 += q[i]; }
  total32 = Math.fround(total32);
  for (let i = 0; i < n; i++) if (keep[i]) { q[i] = Math.fround(q[i] / total32); keep[i] = q[i] > 0 ? 1 : 0; }
  if (p < 1) {
    let before = 0;
    for (const i of order) {
      if (!keep[i]) continue;
      if (before >= p) keep[i] = 0;
      before = Math.fround(before + q[i]);
    }
  }
  let m = -Infinity;
  for (let i = 0; i < n; i++) if (keep[i]) m = Math.max(m, row[i] / T);
  const probs = new Float64Array(n);
  let total = 0;
  for (let i = 0; i < n; i++) if (keep[i]) { probs[i] = Math.exp(row[i] / T - m); total += probs[i]; }
  let entropy = 0, sum = 0, kept = 0;
  for (let i = 0; i < n; i++) {
    if (!keep[i]) continue;
    probs[i] /= total; sum += probs[i];
    if (probs[i] > 0) { kept++; entropy -= probs[i] * Math.log(probs[i]); }
  }
  return { probs, entropy: entropy / Math.LN2, sum, kept };
}

function softmax1(row) {  // plain softmax (T = 1), float64
  let m = -Infinity, total = 0;
  for (const v of row) m = Math.max(m, v);
  const out = new Float64Array(row.length);
  row.forEach((v, i) => { out[i] = Math.exp(v - m); total += out[i]; });
  return out.map((v) => v / total);
}

function fmtG(x, digits) {  // Python's "%.{digits}g"
  if (x === 0) return "0";
  const exp = Math.floor(Math.log10(Math.abs(x)));
  if (exp < -4 || exp >= digits) {
    const [mant, e] = x.toExponential(digits - 1).split("e");
    const n = Number(e);
    return `${String(Number(mant))}e${n < 0 ? "-" : "+"}${String(Math.abs(n)).padStart(2, "0")}`;
  }
  return String(Number(x.toPrecision(digits)));
}

function pct(x) { return `${(100 * x).toFixed(1)}%`; }

function draw(root) {
  const d = root.__data, r = rule(root);
  const out = sample(root.__row, d.banned, r.T, r.k, r.p);
  root.__out = out;
  const raw = root.__raw && root.__rawFor === root.__row ? root.__raw : softmax1(root.__row);
  root.__raw = raw; root.__rawFor = root.__row;
  root.querySelector("output[for='sv-T']").textContent = r.T.toFixed(2);
  root.querySelector("output[for='sv-p']").textContent = r.p.toFixed(2);
  const metric = (m, v) => { root.querySelector(`[data-metric='${m}'] .mvalue`).textContent = v; };
  metric("entropy", out.entropy.toFixed(4)); metric("sum", out.sum.toFixed(6)); metric("kept", String(out.kept));
  const top = d.top.slice(0, d.shown);
  if (d.look) root.querySelector(".look").textContent = "👀 " + d.look.replace("{p}", pct(out.probs[top[0].index]));
  root.querySelector(".look").hidden = !d.look;
  drawBars(root.querySelector(".bars"), top, out.probs, raw, d.text);
  root.querySelector("button.chart").textContent = d.text.download_chart;
  drawTable(root.querySelector("table.top"), top, out.probs, raw, d.text);
}

function saveCsv(root) {  // the table as the server's "Download CSV" writes it (ui.widgets.table): full precision
  const d = root.__data, out = root.__out, cell = (v) => (/[",\n]/.test(v) ? `"${v.replaceAll('"', '""')}"` : v);
  const lines = [[d.text.token, d.text.id, d.text.logit, d.text.prob, d.text.raw].map(cell).join(",")];
  for (const t of d.top.slice(0, d.shown)) {
    lines.push([t.label, t.id, t.logit, out.probs[t.index], root.__raw[t.index]].map((v) => cell(String(v))).join(","));
  }
  saveFile(new Blob([lines.join("\n") + "\n"], { type: "text/csv" }), "log_top.csv");
}

function saveChart(root) {  // the bars as the other charts' camera saves them: PNG (twice the size) or SVG
  const d = root.__data, svg = root.querySelector(".bars svg").cloneNode(true);
  const drawn = root.querySelectorAll(".bars svg *"), copies = svg.querySelectorAll("*");
  drawn.forEach((e, i) => {  // the page's styles, written into the picture (it leaves the page)
    const css = getComputedStyle(e);
    for (const k of ["fill", "opacity", "font-size", "font-family", "font-weight"]) copies[i].style[k] = css[k];
  });
  svg.setAttribute("xmlns", "http://www.w3.org/2000/svg");
  svg.style.background = paper();
  savePicture(new XMLSerializer().serializeToString(svg), Number(svg.getAttribute("width")),
              Number(svg.getAttribute("height")), d.chart);
}

// A title's lines for a width in pixels: words (a CJK character is a word of its own, twice as wide as a letter)
// filled greedily, about 8 px a letter at the title's 15 px (a phone's 380 px cut one line mid-word)
function titleLines(title, width) {
  const words = title.match(/[\u2e80-\u9fff\uff00-\uffef]|[^\s\u2e80-\u9fff\uff00-\uffef]+\s*|\s+/g) || [title];
  const units = (w) => [...w].reduce((n, c) => n + (/[\u2e80-\u9fff\uff00-\uffef]/.test(c) ? 2 : 1), 0);
  const lines = [""];
  for (const w of words) {
    const last = lines[lines.length - 1];
    if (last && 8 * units(last + w.trimEnd()) > width) lines.push(w.trimStart());
    else lines[lines.length - 1] = last + w;
  }
  return lines.map((l) => l.trim()).filter(Boolean);
}

function drawBars(box, top, probs, raw, text) {
  // as wide as the page gives (a phone: about 380 px, where 720 ran the top bar and its value off the edge)
  const NS = "http://www.w3.org/2000/svg", row = 26, width = Math.max(300, Math.min(720, box.clientWidth || 720));
  const left = Math.min(Math.round(width * 0.44), 24 + 8 * Math.max(4, ...top.map((t) => t.rank.length)));
  const plot = width - left - 70;
  const svgEl = (tag, attrs, t) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (t !== undefined) e.textContent = t;
    return e;
  };
  const most = Math.max(1e-12, ...top.map((t) => Math.max(probs[t.index], raw[t.index])));
  const lines = titleLines(text.chart, width), below = 18 * (lines.length - 1);  // the title's extra lines
  const svg = svgEl("svg", { width, height: row * top.length + 30 + below, role: "img", "aria-label": text.chart });
  lines.forEach((line, i) => svg.append(svgEl("text", { x: 0, y: 14 + 18 * i, class: "title" }, line)));
  top.forEach((t, i) => {
    const y = 24 + below + i * row, p = probs[t.index], q = raw[t.index];
    const g = svgEl("g", { "data-token": String(i) });
    g.append(svgEl("title", {}, `${t.rank}\n${text.prob}: ${fmtG(p, 4)}\n${text.raw}: ${fmtG(q, 4)}`));
    g.append(svgEl("text", { x: left - 6, y: y + row / 2 + 4, "text-anchor": "end", class: "tok" }, t.rank));
    g.append(svgEl("rect", { x: left, y: y + 3, width: (plot * q) / most, height: row - 6, class: "raw" }));
    g.append(svgEl("rect", { x: left, y: y + 6, width: (plot * p) / most, height: row - 12, class: "prob" }));
    g.append(svgEl("text", { x: left + (plot * Math.max(p, q)) / most + 4, y: y + row / 2 + 4, class: "val" },
                   pct(p)));
    svg.append(g);
  });
  box.replaceChildren(svg);
}

function drawTable(table, top, probs, raw, text) {
  const head = el("tr");
  for (const h of [text.token, text.id, text.logit, text.prob, text.raw]) head.append(el("th", {}, h));
  const rows = top.map((t) => {
    const tr = el("tr");
    for (const v of [t.label, String(t.id), t.logit.toFixed(4), fmtG(probs[t.index], 4), fmtG(raw[t.index], 4)]) {
      tr.append(el("td", {}, v));
    }
    return tr;
  });
  table.replaceChildren(el("thead"), el("tbody"));
  table.tHead.append(head);
  table.tBodies[0].append(...rows);
}
