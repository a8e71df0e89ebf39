"""What keeps a shared server fast (bench/protocol_load.py measures it): the server settings, every chart on
plotly's fast JSON path, the attention map's hover made of numbers and labels, tables built only when asked."""
import itertools
import tomllib
from pathlib import Path

import numpy as np
import plotly.io._json as plotly_json
import pytest

from harness.apptest import SMALL, array, figure, open_app, page_names

ROOT = Path(__file__).resolve().parents[2]


def test_server_settings_skip_the_collection_after_each_run_and_the_file_watcher():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    assert config["runner"]["postScriptGC"] is False  # gc.collect(2) after every run: 38% of the server's CPU
    assert config["server"]["fileWatcherType"] == "none"


def _cycle_holding_a_tensor(old: bool):
    """A frame-like cycle holding a tensor, as an interrupted script leaves behind; old: aged into the oldest
    generation first (it survived two collections while its run went on). Returns a weak reference to the tensor."""
    import gc
    import weakref

    import torch

    class Holder:
        pass

    h = Holder()
    h.me, h.tensor = h, torch.zeros(1000)
    gone = weakref.ref(h.tensor)
    if old:
        gc.collect(0)
        gc.collect(1)  # survivors of the middle generation move to the oldest
    del h
    return gone


def _runs_collecting(monkeypatch, n: int, rss=None) -> list:
    """n runs of the app's begin/end with Python's own collections off; the generations the app collected."""
    import gc

    from ui import runs

    calls = []
    real = gc.collect
    monkeypatch.setattr(gc, "collect", lambda generation=2: calls.append(generation) or real(generation))
    if rss is not None:
        monkeypatch.setattr(runs, "resident_bytes", rss)
    monkeypatch.setattr(runs, "_RUNS", itertools.count(1))
    monkeypatch.setitem(runs._last_full, "rss", 0 if rss is None else rss())
    for _ in range(n):
        runs.end(runs.begin())
    return calls


def test_every_tenth_run_collects_the_young_generations_and_frees_a_young_cycle(monkeypatch):
    import gc

    from ui import runs

    gc.disable()  # only the app's own collections count here
    try:
        gone = _cycle_holding_a_tensor(old=False)
        calls = _runs_collecting(monkeypatch, 2 * runs.COLLECT_EVERY, rss=lambda: 10**9)
        assert calls == [1, 1]  # two young collections, no full one: memory did not grow
        assert gone() is None  # the tensor in the cycle is freed
    finally:
        gc.enable()


def test_a_full_collection_frees_an_old_cycle_every_full_every_runs_or_when_memory_grew(monkeypatch):
    import gc

    from ui import runs

    gc.disable()
    try:
        gone = _cycle_holding_a_tensor(old=True)
        calls = _runs_collecting(monkeypatch, runs.FULL_EVERY - 1, rss=lambda: 10**9)
        assert set(calls) == {1} and gone() is not None  # young collections leave an old cycle alone
        calls = _runs_collecting(monkeypatch, runs.FULL_EVERY, rss=lambda: 10**9)
        assert calls[-1] == 2 and calls.count(2) == 1 and gone() is None  # the FULL_EVERY-th run frees it

        gone = _cycle_holding_a_tensor(old=True)
        size = iter([10**9] + [10**9 + runs.FULL_GROWTH + 1] * 10)  # grown past FULL_GROWTH since the last full one
        calls = _runs_collecting(monkeypatch, runs.COLLECT_EVERY, rss=lambda: next(size))
        assert calls == [2] and gone() is None
    finally:
        gc.enable()


def test_resident_bytes_reads_this_process():
    from ui import runs

    assert 10 * 2**20 < runs.resident_bytes() < 64 * 2**30  # a Python process with torch: tens of MB at least


def test_the_first_run_freezes_the_imported_heap_once_and_every_run_is_counted(monkeypatch):
    import gc

    from ui import runs

    counted = []
    begin = runs.begin
    monkeypatch.setattr(runs, "begin", lambda: counted.append(1) or begin())
    runs.freeze_startup_heap.clear()
    gc.unfreeze()
    try:
        at = open_app(lang="en")
        assert gc.get_freeze_count() > 100_000  # streamlit, torch, plotly: out of every later collection's scan
        assert gc.isenabled()  # switched off only during the server's first run
        at.run()
        assert len(counted) >= 2  # each run counts towards the collection every tenth run
    finally:
        gc.unfreeze()


def test_pandas_is_imported_whole_before_any_chart_is_built():
    """plotly's validators and JSON encoder read pandas from sys.modules without importing it: a session building a
    chart while another session's first table imports pandas met a half-imported module (AttributeError: partially
    initialized module 'pandas'), so app.py imports it before the preload chart, and every run waits for it."""
    import ast

    body = ast.parse((ROOT / "app.py").read_text(encoding="utf-8")).body
    first_pandas = next(i for i, node in enumerate(body) if isinstance(node, ast.Import)
                        and any(a.name == "pandas" for a in node.names))
    first_run = next(i for i, node in enumerate(body) if "preload_charts" in ast.unparse(node))
    assert first_pandas < first_run


def test_the_navigation_is_listed_before_torch_is_imported():
    """On a server's first run torch's import takes seconds: app.py lists the pages (titles in the link's language)
    before it imports the sidebar (and torch with it), so the sidebar never shows the pages/ folder's file names."""
    source = (ROOT / "app.py").read_text(encoding="utf-8")
    assert source.index("st.navigation(") < source.index("from ui.sidebar import") < source.index(".run()")
    assert source.index('setdefault("lang", link_lang())') < source.index("PAGES = {")


def _preload():
    from ui import runs

    runs.preload_charts()


@pytest.mark.parametrize(("lang", "words"), [(None, "Starting: the server loads PyTorch"), ("zh", "正在启动")])
def test_a_browser_that_arrives_while_the_server_starts_reads_what_it_waits_for(monkeypatch, lang, words):
    """The first run of a fresh server imports torch and loads the model (seconds): the preload slot says so, in the
    link's language, until the page replaces it."""
    from streamlit.testing.v1 import AppTest

    from ui import runs

    monkeypatch.setattr(runs, "first_run", lambda: True)  # as if torch were not imported yet
    at = AppTest.from_function(_preload)
    if lang:
        at.query_params["lang"] = lang
    at.run()
    assert not at.exception and len(at.caption) == 1 and words in at.caption[0].value
    assert at.get("plotly_chart")  # the hidden chart that loads plotly.js meanwhile
    monkeypatch.setattr(runs, "first_run", lambda: False)
    started = AppTest.from_function(_preload)  # a server already started: the hidden chart alone
    started.run()
    assert not started.caption and started.get("plotly_chart")


def test_a_first_run_that_fails_still_turns_collection_back_on(monkeypatch):
    import gc

    from ui import runs, session

    def broken():
        raise RuntimeError("a page that fails")

    monkeypatch.setattr(runs, "first_run", lambda: True)  # the next run counts as the server's first
    monkeypatch.setattr(session, "page_context", broken)
    try:
        at = open_app(lang="en")
        assert at.exception  # the run ended in the page's error
        assert gc.isenabled()
    finally:
        gc.enable()


@pytest.fixture
def slow_json_walks(monkeypatch):
    """Calls of plotly's Python walk over a figure, which it falls back to when orjson cannot encode one (an
    array of mixed strings and numbers): five times the time of the chart it serialises."""
    calls = []
    walk = plotly_json.clean_to_json_compatible

    def recording(obj, **kwargs):
        calls.append(type(obj).__name__)
        return walk(obj, **kwargs)

    monkeypatch.setattr(plotly_json, "clean_to_json_compatible", recording)
    return calls


@pytest.mark.parametrize("page", [p for p in page_names() if p != "train"])
def test_every_chart_of_every_page_takes_plotlys_fast_json_path(page, slow_json_walks):
    at = open_app(page, lang="en")
    assert not at.exception
    assert slow_json_walks == [], f"{page}: a chart fell back to plotly's slow JSON walk"


def test_attention_hover_is_numbers_in_customdata_and_token_labels_on_the_axes():
    """The server's large map (a text longer than the browser's view takes): the hover's numbers in customdata, the
    tokens as the axes' categories (one string per row and column, not per cell)."""
    at = open_app("attention", model="shipped:everyday-gpt", lang="en", text=" ".join(["The cat sat on the mat."] * 11))
    main = figure(at, "att_main")
    heat = main["data"][0]
    custom = array(heat["customdata"])
    n = len(heat["y"])
    assert n > 80 and custom.dtype.kind == "f" and custom.shape == (n, n, 3)  # q·k, q·k/√d_k, weight
    assert heat["x"] == heat["y"] and all(isinstance(v, str) for v in heat["y"])  # the axes name the tokens
    assert "%{y}" in heat["hovertemplate"] and "%{customdata[2]:.4f}" in heat["hovertemplate"]
    np.testing.assert_allclose(np.nan_to_num(array(heat["z"])), np.tril(custom[..., 2]), atol=1e-6)  # weights drawn


def test_qkv_tables_are_built_only_when_their_expander_is_opened():
    at = open_app("attention", model=SMALL, lang="en", text="a b c d")
    at.session_state["att_qkv_maps_open"] = True  # the Q, K, V section, opened
    at.run()
    before = len(at.dataframe)
    at.session_state["att_qkv_open"] = True  # its tables asked for
    at.run()
    assert not at.exception
    assert len(at.dataframe) == before + 3  # Q, K and V


def test_charts_built_without_plotlys_validation_send_what_a_validated_build_sends(monkeypatch):
    """ui.plain_figures.figure skips plotly's property validation when a chart is built (about a quarter of the
    Attention page's samples under py-spy), and ui.plain_figures.sendable its deep copy when a chart is sent: every
    builder's JSON must equal a fully validated build's sent by plotly's to_dict (its tick labels allowed past the
    plot's edge, as sendable does for every chart), later update_* calls included."""
    import json

    import plotly.graph_objects as go
    import plotly.io as pio

    from ui import figures, masked_cells, model_map, panels
    from ui.chart_theme import themed
    from ui.plain_figures import label_overflow_allowed, sendable

    rng = np.random.default_rng(0)
    labels = figures.axis_labels([f"t{i}" for i in range(12)])
    grid = np.asarray(labels)
    names = (np.broadcast_to(grid[:, None], (12, 12)), np.broadcast_to(grid[None], (12, 12)))
    masked = np.triu(np.ones((12, 12), dtype=bool), 1)

    def charts(sent) -> list[str]:
        heat = figures.token_heatmap(rng.random((12, 12)), labels, labels, title="map", colorscale=figures.DIVERGING,
                                     customdata=rng.random((12, 12, 3)), names=names, zmid=0, hovertemplate=None)
        masked_cells.mark_cells(heat, masked, hovertemplate="masked")
        heat.update_xaxes(title_text="keys")
        heat.update_layout(title="a string title", xaxis_title="keys again")
        out = [heat,
               figures.lines(labels, {"a": rng.random(12), "b": rng.random(12)}, title="lines", x_title="x"),
               figures.bars(labels[:5], rng.random(5), title="bars", secondary=("old", rng.random(5))),
               figures.bars(labels[:5], rng.random(5) * 20, x_title="count", x_format="d", hover_format=".4~g"),
               figures.bars(labels[:4], rng.random(4), y_title="share", x_format="~%"),
               figures.lines(range(9), {"curve": rng.random(9)}, y_title="y", height=200),
               panels.thumbnails([rng.random((6, 6)) for _ in range(5)], [f"head {h}" for h in range(5)], cols=4,
                                  masked=[masked[:6, :6]] * 5, selected=2),
               model_map.model_map([{"id": "a", "x": 1, "y": 1, "w": 1, "h": 1, "kind": "attn", "title": "A",
                                     "detail": "d", "page": "attention"},
                                    {"id": "b", "x": 1, "y": 3, "w": 1, "h": 1, "kind": "ffn", "title": "B",
                                     "detail": "d", "page": "ffn"}], [("a", "b")], width=3, height=4)]
        return [json.loads(pio.to_json(sent(f), validate=False)) for f in out]

    def sent_fast(fig):
        before = pio.to_json(fig.to_dict(), validate=False)
        spec = sendable(fig).to_dict()
        assert pio.to_json(fig.to_dict(), validate=False) == before  # the figure is left as it was
        return spec

    fast = charts(sent_fast)
    rng = np.random.default_rng(0)
    validated = lambda data=(), layout=None: go.Figure(list(data), layout)  # plotly's own path
    monkeypatch.setattr(figures, "figure", validated)
    monkeypatch.setattr(model_map, "figure", validated)
    monkeypatch.setattr(masked_cells, "add", lambda fig, trace, **where: fig.add_trace(trace, **where))
    # the same properties and values (plotly.js reads no key order), in the same look (ui.chart_theme)
    assert fast == charts(lambda fig: themed(label_overflow_allowed(fig.to_dict()), None))


def test_a_new_figure_copies_no_template_and_a_label_list_is_sent_as_it_is():
    """Building a figure skips plotly's default template (the theme drops it anyway: 2 ms a figure), and sendable
    shares a list of labels (16,384 strings for the hover of a 128-token map) instead of walking and copying it,
    while arrays inside lists of objects still become base64."""
    from ui.plain_figures import _converted, figure

    assert "template" not in figure([{"type": "heatmap", "z": np.zeros((2, 2))}]).layout.to_plotly_json()
    labels, grid = [f"t{i}" for i in range(5)], [["a", "b"], ["c", "d"]]
    spec = _converted({"data": [{"text": labels, "hovertext": grid, "z": np.ones(3)}],
                       "layout": {"annotations": [{"x": np.arange(2)}, {"x": 1}]}})
    assert spec["data"][0]["text"] is labels and spec["data"][0]["hovertext"][0] is grid[0]
    assert spec["data"][0]["z"]["dtype"] == "f8" and "bdata" in spec["layout"]["annotations"][0]["x"]


def test_every_cartesian_axis_lets_its_labels_pass_the_edge_unless_a_chart_says_otherwise():
    """Plotly measures every tick label in the browser to hide those past the plot's edge (half of a long text's
    drawing time); the margins hold the labels, so sendable turns that off on each axis a cartesian trace uses."""
    import plotly.graph_objects as go

    from ui.plain_figures import label_overflow_allowed, sendable

    spec = label_overflow_allowed({
        "data": [{"type": "heatmap"}, {"type": "scatter", "xaxis": "x2", "yaxis": "y2"}, {"type": "pie"}],
        "layout": {"xaxis3": {"title": {"text": "t"}}, "yaxis": {"ticklabeloverflow": "hide past div"}}})
    allow = {"ticklabeloverflow": "allow"}
    assert spec["layout"] == {"xaxis": allow, "yaxis": {"ticklabeloverflow": "hide past div"}, "xaxis2": allow,
                              "yaxis2": allow, "xaxis3": {**allow, "title": {"text": "t"}}}
    pie = sendable(go.Figure(go.Pie(values=[1, 2]))).to_dict()
    assert not any(k.startswith(("xaxis", "yaxis")) for k in pie["layout"])  # no empty axes drawn around a pie
