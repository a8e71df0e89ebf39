"""AppTest helpers for the page tests (tests/ui/) and the page benches: open the app on a page, read what it shows.

Streamlit quirk: with a folder named `pages/` next to app.py, AppTest (and a fresh server's first run) takes
Streamlit's old "pages directory" path and runs a page file WITHOUT app.py, so the sidebar and session setup
never happen. `no_pages_dir_mode()` switches that path off, as app.py's own st.navigation call does.
"""
from __future__ import annotations

import base64
import functools
import json
import os
import re
from contextlib import contextmanager
from pathlib import Path
from unittest.mock import patch

import numpy as np
import streamlit.testing.v1.app_test as app_test_module
import streamlit.testing.v1.local_script_runner as local_script_runner
from streamlit.components.v2 import manifest_scanner
from streamlit.runtime.pages_manager import PagesManager
from streamlit.runtime.scriptrunner import get_script_run_ctx
from streamlit.runtime.scriptrunner.script_cache import ScriptCache
from streamlit.testing.v1 import AppTest

from ui.i18n import strings

# What a server does once and AppTest does for every test or run, done once a process (the ui tests open about 400
# AppTests and run them 860 times: together these took 40% of their time). A new AppTest scans the metadata of every
# installed package for Streamlit components (0.3 s of CPU on a 2-core machine); the packages do not change while
# tests run.
manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)


class _CompiledOnce(ScriptCache):
    """Every AppTest run compiles app.py and the page anew (a ScriptCache of its own: parsing, Streamlit's magic,
    compiling); this one keeps a script's code while its file is unchanged (a file edited meanwhile is compiled
    again; AppTest.from_string names its files by their text)."""

    def __init__(self):
        super().__init__()
        self._stamps: dict[str, tuple[int, int]] = {}

    def get_bytecode(self, script_path: str):
        stat = os.stat(script_path)
        stamp = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            if self._stamps.get(script_path) != stamp:
                self._cache.pop(script_path, None)
                self._stamps[script_path] = stamp
        return super().get_bytecode(script_path)


_compiled = _CompiledOnce()
# where AppTest makes its caches: a run's pages (app_test) and its main script, app.py (local_script_runner)
app_test_module.ScriptCache = local_script_runner.ScriptCache = lambda: _compiled

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
SMALL = "preset:course-gpt@cl100k_base"  # decoder-only, d_model 64, max_len 16: fast on a CPU
DEFAULT = "shipped:everyday-gpt"  # the app's default model
CAT = "The cat sat on the mat. The cat sat on the"  # the induction demo's repeated sentence (13 tokens on the default)
EN = {k: v["en"] for k, v in strings().items()}  # every string in English, by key
ENGLISH_ONLY = {v["en"] for v in strings().values() if v["en"] != v["zh"]}  # what a page in 中文 must not show


def page_names() -> list[str]:
    """The page names app.py registers, in navigation order."""
    return re.findall(r'\bpage\(\s*"([a-z_]+)"', (ROOT / "app.py").read_text(encoding="utf-8"))


def page_files() -> list[str]:
    """The page scripts app.py registers, relative to the app (in navigation order)."""
    return [page_file(n) for n in page_names()]


def page_file(name: str) -> str:
    """The page file of a name (e.g. "logits" -> "pages/5_logits.py")."""
    matches = [p for p in (ROOT / "pages").glob("*.py") if p.stem.split("_", 1)[-1] == name]
    assert len(matches) == 1, f"no single page named {name!r}"
    return f"pages/{matches[0].name}"


@contextmanager
def no_pages_dir_mode():
    """Make every AppTest run go through app.py (st.navigation), never the legacy pages-directory runner."""
    original = PagesManager.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        PagesManager.uses_pages_directory = False

    PagesManager.__init__ = init
    try:
        yield
    finally:
        PagesManager.__init__ = original


@contextmanager
def harness_language(code: str):
    """AppTest re-formats widget options outside any script run, where t() cannot see the app's language;
    make t() use `code` there (inside the app's runs it still reads st.session_state)."""
    from ui import i18n

    original = i18n.lang
    i18n.lang = lambda: original() if get_script_run_ctx(suppress_warning=True) else code
    try:
        yield
    finally:
        i18n.lang = original


def open_app(page: str | None = None, timeout: float = 120, **query) -> AppTest:
    """Run the app once with these URL query params, on a page (by name) or the home page: the session's first run is
    that page's, as a link to it opens it (before the first run AppTest finds a page by its file's name, which is the
    name app.py gives it; one run, not the home page's first)."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    for k, v in query.items():
        at.query_params[k] = v
    if page:
        at.switch_page(page_file(page))
    return at.run()


def open_export(at: AppTest, *views: str) -> AppTest:
    """Open these views' Export expanders (ui.tools.export_panel builds its contents only when open) and rerun."""
    for view in views:
        at.session_state[f"xp_open_{view}"] = True
    return at.run()


def assert_clean(at: AppTest) -> None:
    """The run showed no exception and no error box."""
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def metric(at: AppTest, label: str) -> str:
    """The shown value of the metric with this label."""
    values = [m.value for m in at.metric if m.label == label]
    assert values, f"no metric {label!r} in {[m.label for m in at.metric]}"
    return values[0]


def messages(at: AppTest) -> list[str]:
    """Every error, warning and info text shown (main area and sidebar)."""
    return [e.value for kind in ("error", "warning", "info", "success") for e in getattr(at, kind)]


def shown_texts(at: AppTest) -> list[str]:
    """Every heading, text, message, widget and metric label, table column and chart title / axis title /
    legend name the run shows (e.g. to look for strings left in English on a Chinese page)."""
    texts = [e.value for kind in ("title", "header", "subheader", "markdown", "caption") for e in getattr(at, kind)]
    texts += messages(at) + [m.label for m in at.metric]
    texts += [w.label for kind in ("selectbox", "radio", "slider", "number_input", "button", "text_area", "checkbox")
              for w in getattr(at, kind)]
    texts += [str(c) for d in at.dataframe for c in d.value.columns]
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        layout = spec.get("layout", {})
        texts += [a.get("text") for a in layout.get("annotations", [])] + [tr.get("name") for tr in spec["data"]]
        texts += [x for tr in spec["data"] if "text" in str(tr.get("mode", "")) for x in tr.get("text") or []
                  if isinstance(x, str)]  # labels drawn as a text trace (the model map's boxes)
        texts += [v.get("title", {}).get("text") for k, v in layout.items() if k.startswith(("xaxis", "yaxis"))]
        texts.append(layout.get("title", {}).get("text"))
    return [s for s in texts if s]


def figure(at: AppTest, key: str) -> dict:
    """The plotly spec (data, layout) the page sent for the chart rendered with `key`."""
    for chart in at.get("plotly_chart"):
        if chart.proto.id.endswith(f"-{key}"):
            return json.loads(chart.proto.spec)
    raise KeyError(f"no plotly chart with key {key!r}")


def array(value) -> np.ndarray:
    """A plotly array as numpy: a plain list, or the {'dtype', 'bdata', 'shape'} typed-array encoding."""
    if isinstance(value, dict) and "bdata" in value:
        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        shape = value.get("shape")
        if isinstance(shape, str):
            shape = [int(s) for s in shape.split(",")]
        return arr.reshape(shape) if shape else arr
    return np.asarray(value, dtype=float)


def _components(at: AppTest, *, as_sent: bool = False) -> list[dict]:
    """Each view element's data as attention.js reads it, or `as_sent`: a self-attention map's key labels are its
    query labels (sent once, "k": null), and the pair of a map the view draws has the view's labels ("from_view": the
    view's key)."""
    found = [json.loads(e.proto.json) for e in at.get("bidi_component")]
    if as_sent:
        return found
    found = [{**d, "k": d["q"]} if d.get("k", 0) is None and d.get("q") else d for d in found]
    views = {d["key"]: d for d in found if "pick" in d and "modes" in d}
    return [{**d, "q": views[d["from_view"]]["q"], "k": views[d["from_view"]]["k"]} if d.get("from_view") else d
            for d in found]


def attention_view(at: AppTest) -> dict | None:
    """The data of the Attention page's view (ui.attention_view: what the browser draws the maps with), or None where
    the page drew its own charts (a map of more than its VIEW_TOKENS tokens)."""
    found = [d for d in _components(at) if "pick" in d and "modes" in d]
    return found[0] if found else None


def attention_maps(at: AppTest) -> dict | None:
    """The data of the Attention page's maps element (ui.attention_maps.attention_maps: the blocks this run sent)."""
    found = [d for d in _components(at) if d.get("role") == "maps"]
    return found[0] if found else None


def attention_pair(at: AppTest) -> dict | None:
    """The data of the Attention page's scores before and after masking drawn in the browser (ui.attention_pair), or
    None where the page drew them as its own two charts."""
    found = [d for d in _components(at) if d.get("role") == "pair"]
    return found[0] if found else None


def pair_drawn(at: AppTest) -> tuple[np.ndarray, np.ndarray, dict]:
    """(the scores to 4 decimals, NaN where not a number; the mask, True where kept; the data) of the Attention page's
    scores before and after masking, as attention.js reads them (ui.attention_pair)."""
    from ui.attention_pair import decode

    data = attention_pair(at)
    assert data is not None, "the page drew no scores before and after masking"
    n_q, n_k = data["n_q"], data["n_k"]
    kept = np.unpackbits(np.frombuffer(base64.b64decode(data["mask"]), dtype=np.uint8), bitorder="little")
    return decode(base64.b64decode(data["scores"]), n_q, n_k), kept[: n_q * n_k].reshape(n_q, n_k).astype(bool), data


def shown_layer(at: AppTest) -> int:
    """The layer the Attention page shows: its Layer box, or the pick the server gave the view that holds it."""
    view = attention_view(at)
    return int(view["pick"]["layer"]) if view is not None else int(at.selectbox(key="layer").value)


def shown_mask(at: AppTest) -> str:
    """The mask mode the Attention page shows: its radio, or the pick the server gave the view that holds it."""
    view = attention_view(at)
    return view["pick"]["mask"] if view is not None else at.radio(key="mask_mode").value


def _choose(at: AppTest, name: str, value, widget) -> AppTest:
    """Choose the Attention page's layer or mask as a learner does: in the page's widget, or in the browser's view
    that holds it (what the view's "pick" tells the server, as ui.attention_view takes it); then run."""
    view = attention_view(at)
    if view is None:
        return widget().set_value(value).run()
    from ui import attention_view as view_module

    with patch.object(view_module.st, "session_state", at.session_state):
        view_module.adopt({**view["pick"], name: value})
    return at.run()


def set_layer(at: AppTest, layer: int) -> AppTest:
    return _choose(at, "layer", layer, lambda: at.selectbox(key="layer"))


def set_mask(at: AppTest, mode: str) -> AppTest:
    return _choose(at, "mask", mode, lambda: at.radio(key="mask_mode"))


def shown_head(at: AppTest) -> int:
    """The head the Attention page shows large: its Head box, or where the browser's view holds the head, the pick
    the server gave the view."""
    view = attention_view(at)
    return int(view["pick"]["head"]) if view is not None else int(at.selectbox(key="head").value)
