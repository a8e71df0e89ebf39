"""ui.chart_theme: Streamlit's chart look written into each chart (no template, so the browser draws a chart once),
the chart's own settings winning, lines coloured only where plotly draws them, and a datarevision that names the
whole spec (plotly skips comparing data arrays when one is given, so it must change whenever anything does)."""
import copy

import pytest

from ui.chart_theme import LOOKS, PALETTES, merged, revision, themed


def spec(**layout) -> dict:
    return {"data": [{"type": "heatmap", "z": [[1, 2], [3, 4]]},
                     {"type": "bar", "x": [1, 2], "y": ["a", "b"], "orientation": "h", "xaxis": "x2", "yaxis": "y2"},
                     {"y": [1, 2, 3], "xaxis": "x3", "yaxis": "y3"}],
            "layout": {"template": {"layout": {"font": {"color": "#000001"}}}, "xaxis": {}, "yaxis": {},
                       "xaxis2": {}, "yaxis2": {}, "xaxis3": {"showgrid": True}, "yaxis3": {"ticks": "outside"},
                       **layout}}


@pytest.mark.parametrize("kind", ["light", "dark"])
def test_the_look_is_written_into_the_chart_and_the_template_is_gone(kind):
    text, title_colour, _legend, bg, grid, _hover, colorway, seq = PALETTES[kind]
    before = spec(title={"text": "attention"}, font={"size": 14})
    sent = themed(copy.deepcopy(before), kind)
    layout = sent["layout"]
    assert "template" not in layout
    assert layout["paper_bgcolor"] == layout["plot_bgcolor"] == bg and layout["colorway"] == list(colorway)
    assert layout["font"] == {"color": text, "family": '"Source Sans", sans-serif', "size": 14, "weight": 400}
    assert layout["title"]["text"] == "<b>attention</b>" and layout["title"]["font"]["color"] == title_colour
    assert sent["data"][0]["colorscale"][0] == [0.0, seq[0]]  # a heatmap without a scale takes the theme's
    assert sent["data"][2]["marker"] == {"line": {"width": 0}}  # a trace with no type is a scatter
    assert all(layout[a]["tickfont"]["color"] == text and layout[a]["automargin"] for a in ("xaxis", "yaxis2"))
    # grid lines where plotly draws them: a y axis, not one that bars lie along, an x axis only when asked
    assert layout["yaxis"]["gridcolor"] == grid and "gridcolor" not in layout["yaxis2"]
    assert "gridcolor" not in layout["xaxis"] and layout["xaxis3"]["gridcolor"] == grid
    assert layout["yaxis3"]["tickcolor"] == grid and "tickcolor" not in layout["yaxis"]  # ticks only where drawn
    # x labels that do not fit level turn 45° (plotly's first choice, 30°, overlapped the FFN page's on a phone)
    assert all(layout[a]["autotickangles"] == [0, -45, -90] for a in ("xaxis", "xaxis2", "xaxis3"))
    # a legend lies in a row under the plot (plotly makes room for it): on the right it left a phone's plot 64 of 358 px
    assert {k: layout["legend"][k] for k in ("orientation", "yref", "y", "yanchor", "x", "xanchor")} == {
        "orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0, "xanchor": "left"}
    assert before == spec(title={"text": "attention"}, font={"size": 14})  # what was given is left as it was


def test_a_charts_own_settings_win_over_the_look():
    own = spec(paper_bgcolor="rgba(0,0,0,0)", yaxis={"gridcolor": "red", "automargin": False},
               title={"text": "<b>bold already</b>", "font": {"size": 20}})
    own["data"][0]["colorscale"] = "RdBu"
    layout = themed(own, "dark")["layout"]
    assert layout["paper_bgcolor"] == "rgba(0,0,0,0)" and layout["plot_bgcolor"] == PALETTES["dark"][3]
    assert layout["yaxis"]["gridcolor"] == "red" and layout["yaxis"]["automargin"] is False
    assert layout["title"]["text"] == "<b>bold already</b>" and layout["title"]["font"]["size"] == 20
    assert layout["title"]["font"]["family"] == '"Source Sans", sans-serif'
    assert themed(own, "dark")["data"][0]["colorscale"] == "RdBu"
    assert themed(spec(), None) == themed(spec(), "light")  # no theme known (a test run): the light look


def test_merged_keeps_nested_defaults_and_changes_neither_argument():
    a, b = {"x": {"p": 1, "q": 2}, "y": 1}, {"x": {"q": 3}, "z": [1]}
    assert merged(a, b) == {"x": {"p": 1, "q": 3}, "y": 1, "z": [1]}
    assert a == {"x": {"p": 1, "q": 2}, "y": 1} and b == {"x": {"q": 3}, "z": [1]}


def test_the_data_revision_changes_with_anything_in_the_spec_and_only_then():
    base = themed(spec(), "light")
    assert base["layout"]["datarevision"] == themed(spec(), "light")["layout"]["datarevision"]
    changed = spec()
    changed["data"][0]["z"] = {"dtype": "f8", "bdata": "A" * 400, "shape": "2, 2"}  # a big array, as sent
    other = copy.deepcopy(changed)
    other["data"][0]["z"]["bdata"] = "A" * 399 + "B"
    revisions = {themed(s, "light")["layout"]["datarevision"] for s in (spec(), changed, other)}
    ticks = spec(xaxis={"ticktext": ["a", "b"]})
    revisions |= {themed(ticks, "light")["layout"]["datarevision"], themed(spec(), "dark")["layout"]["datarevision"]}
    assert len(revisions) == 5  # data, a big array's last letter, tick labels (layout arrays), the theme
    assert revision({"data": [], "layout": {}}) != revision({"data": [{}], "layout": {}})


def test_both_looks_have_the_same_settings():
    light, dark = LOOKS["light"], LOOKS["dark"]
    keys = lambda d: {k: keys(v) if isinstance(v, dict) else None for k, v in d.items()}
    assert keys(light[0]) == keys(dark[0]) and keys(light[1]) == keys(dark[1])


def test_every_chart_is_sent_without_streamlits_theme_and_in_the_light_look():
    """In the app (AppTest knows no browser theme: the light look), each chart says theme "" and has no template."""
    import json

    from harness.apptest import assert_clean, open_app

    at = open_app("heads", model="shipped:reverse", text="d a c b", tgt="= b c a", lang="en")
    assert_clean(at)
    charts = at.get("plotly_chart")
    assert charts
    for c in charts:
        assert c.proto.theme == ""
        layout = json.loads(c.proto.spec)["layout"]
        assert "template" not in layout and layout["paper_bgcolor"] == PALETTES["light"][3]
        assert layout["datarevision"]


def test_an_animation_is_sent_in_the_look_with_its_frames():
    """No page animates today; one that does still gets the look (it is sent with theme None like every chart)."""
    import plotly.graph_objects as go

    from ui.plain_figures import sendable

    fig = go.Figure(data=[go.Scatter(y=[1, 2])], frames=[go.Frame(data=[go.Scatter(y=[2, 1])])])
    sent = sendable(fig, "dark").to_dict()
    assert sent["frames"][0]["data"][0]["y"] == [2, 1]
    assert "template" not in sent["layout"] and sent["layout"]["paper_bgcolor"] == PALETTES["dark"][3]


def test_dark_tick_labels_a_chart_sets_for_a_light_page_turn_light_on_the_dark_one():
    """Token labels are drawn "#222" (ui.figures.token_heatmap): on the dark page they were invisible."""
    own = spec(yaxis={"tickfont": {"size": 9, "color": "#222"}}, xaxis={"tickfont": {"color": "#d62728"}})
    dark, light = themed(copy.deepcopy(own), "dark")["layout"], themed(copy.deepcopy(own), "light")["layout"]
    assert dark["yaxis"]["tickfont"] == {"size": 9, "color": PALETTES["dark"][2]}
    assert light["yaxis"]["tickfont"]["color"] == "#222"
    assert dark["xaxis"]["tickfont"]["color"] == "#d62728"  # a colour that reads on both is left alone
    assert dark["yaxis2"]["tickfont"]["color"] == PALETTES["dark"][0]  # the look's own grey stays


@pytest.mark.parametrize("kind", ["light", "dark"])
def test_attention_thumbnails_label_each_head_in_the_page_s_text_colour_at_a_readable_size(kind):
    """The thumbnails' labels were about 8 px (a <sup>) in the charts' grey: each is now a line of its own at 12 px
    in the page's text colour (a colour a chart chose itself stays)."""
    import numpy as np

    from ui.panels import thumbnails

    fig = thumbnails([np.eye(3)] * 3, ["head 0<br>previous token 0.91", "head 1<br>itself 0.60", "head 2"], cols=3,
                     selected=1)
    sent = themed(fig.to_plotly_json(), kind)
    notes = sent["layout"]["annotations"]
    assert len(notes) == 3 and all(n["font"]["size"] >= 11 and "<sup>" not in n["text"] for n in notes)
    assert all(n["font"]["color"] == PALETTES[kind][2] for n in notes)  # the page's text colour, not the grey
    own = themed({"data": [], "layout": {"annotations": [{"text": "x", "font": {"color": "red"}}]}}, kind)
    assert own["layout"]["annotations"][0]["font"] == {"color": "red"}
