// What every view of static/views uses (ui/views.py has the browser join it before each view's own script).

function el(tag, attrs = {}, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;  // text, never HTML: a token may be "<script>"
  return e;
}

function typed(b64, Type) {  // base64 of little-endian numbers, as the server's numpy wrote them
  const bin = atob(b64), bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Type(bytes.buffer);
}

function paper() {  // the page's background (light or dark)
  return getComputedStyle(document.querySelector("[data-testid='stApp']") || document.body).backgroundColor;
}

function saveFile(blob, file) {
  const a = el("a", { download: file });
  a.href = URL.createObjectURL(blob);
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
}

// A picture (SVG text, w x h) saved as the other charts' camera saves them: SVG, or PNG at twice the size on the
// page's background; `chart` is the view's {format, file} (the sidebar's format, the chart's file name).
function savePicture(text, w, h, chart) {
  if (chart.format === "svg") { saveFile(new Blob([text], { type: "image/svg+xml" }), chart.file); return; }
  const img = new Image();
  img.onload = () => {
    const canvas = el("canvas", { width: 2 * w, height: 2 * h }), g = canvas.getContext("2d");
    g.fillStyle = paper();
    g.fillRect(0, 0, canvas.width, canvas.height);
    g.drawImage(img, 0, 0, canvas.width, canvas.height);
    canvas.toBlob((blob) => saveFile(blob, chart.file), "image/png");
  };
  img.src = "data:image/svg+xml;charset=utf-8," + encodeURIComponent(text);
}
