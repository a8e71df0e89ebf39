"""The pages' own views drawn in the browser (st.components.v2): each one's script is static/views/common.js (what
every view uses) followed by static/views/<name>.js, with static/views/<name>.css. Adding a view: those two files and
one `component` call in the module that sends its data.

The scripts and the CSS are files the server serves (Streamlit's static serving, .streamlit/config.toml) and the
browser fetches once per page load, then keeps in its cache: the view's element carries a loader of a few lines, so a
run that sends new data (another layer, another text) does not send the script again (19 KB, about 6.5 KB on the wire,
each time) nor the CSS (3.7 KB, about 1.2 KB on the wire)."""
from __future__ import annotations

import base64
import hashlib
import json
from functools import cache

import streamlit as st

from transformer_core.sources import ROOT

VIEWS = ROOT / "static" / "views"  # served at <the app's address>/app/static/views/
URL_PATH = "app/static/views"

# The loader: fetch the parts (relative to the page's address, as Streamlit serves them; the addresses hold a hash of
# the view's files, so an updated server's browsers fetch them anew), join the scripts, import the result once per
# page (every view element of that kind shares it), put the CSS (the last part) in the element's own root, where the
# view's styles apply and no other's, and draw. Where they cannot be fetched, a note in the view's place (its shadow
# root) in the learner's language; the next run tries again. An error of the view's own drawing is no failed load: it
# stays in the browser's console. An element of no words (no picture of its own: the Attention page's maps) leaves the
# note to the view beside it.
LOADER = """const parts = %(parts)s, v = "%(version)s", loaded = window.__teViews ??= {};
const script = () => (loaded[v] ??= Promise.all(parts.map((p) => fetch(`%(base)s/${p}?v=${v}`)
  .then((r) => (r.ok ? r.text() : Promise.reject(new Error(`${p}: ${r.status}`)))))).then(async (t) => [
  await import(URL.createObjectURL(new Blob([t.slice(0, -1).join("\\n")], { type: "text/javascript" }))), t.at(-1)]));
export default function (component) {
  const place = component.parentElement, put = (tag, name, text) => place.querySelector(`${tag}.${name}`)
    || place.prepend(Object.assign(document.createElement(tag), { className: name, textContent: text }));
  script().then(([view, css]) => {
    place.querySelector(".load-failed")?.remove();
    put("style", "te", css);
    view.default(component);
  }, (e) => {
    delete loaded[v];
    console.error(e);
    const words = component.data?.text?.load_failed;
    words && put("p", "load-failed", words);
  });
}
"""


def parts(name: str) -> tuple[str, str]:
    """The files of view `name`'s script, in the order they are joined."""
    return "common.js", f"{name}.js"


def source(name: str) -> str:
    """The whole script of view `name`, as the browser joins it (also what the browser tests load)."""
    return "\n".join((VIEWS / f).read_text(encoding="utf-8") for f in parts(name))


def files(name: str) -> tuple[str, ...]:
    """What view `name`'s loader fetches: its script's parts, then its CSS."""
    return *parts(name), f"{name}.css"


@cache
def loader(name: str) -> str:
    """The few lines a view's element carries: they fetch the parts of its script and its CSS from the server."""
    return LOADER % {"parts": json.dumps(list(files(name))), "version": version(name), "base": URL_PATH}


def version(name: str) -> str:
    """A hash of view `name`'s files: their addresses carry it, so a changed file is fetched anew."""
    digest = hashlib.sha256()
    for f in files(name):
        digest.update((VIEWS / f).read_bytes())
    return digest.hexdigest()[:10]


def b64(raw: bytes) -> str:
    """Bytes as a view's data carries them (common.js's `typed` reads numbers back)."""
    return base64.b64encode(raw).decode("ascii")


def keys(q_lab, k_lab) -> list[str] | None:
    """A map's key labels for a view's data: None where they are its query labels (self-attention; attention.js reads
    the queries'), which sends them once."""
    return None if list(k_lab) == list(q_lab) else list(k_lab)


def component(key: str, name: str):
    """View `name`'s element: the loader only (its CSS comes with its script: 3.7 KB less in each element sent)."""
    return st.components.v2.component(key, js=loader(name))
