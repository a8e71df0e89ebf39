"""What the server's first run does differently (app.py): it sends the preload chart before any import of ours,
so the browser fetches and evaluates plotly.js (0.7 s of its time) while the server imports torch, and it runs
with the garbage collector off. This module imports nothing but Streamlit, so it is ready at once."""
import sys

import streamlit as st


def first_run() -> bool:
    """Whether the server has not imported torch yet: its first run (or the few that browsers start at once).
    A lookup, not gc.get_freeze_count(), which walks every frozen object (10 ms on each run under load)."""
    return "torch" not in sys.modules


def preload_charts():
    """On a browser's first run only: an empty, invisible chart; returns its slot, to clear once the page is on
    its way. Without it the first page's picture appeared 1.5 s after its title (bench/cold_start.py)."""
    slot = st.empty()
    if not st.session_state.get("_charts_preloaded"):
        st.session_state._charts_preloaded = True
        slot.plotly_chart({"data": [{"type": "scatter", "x": [], "y": []}],
                           "layout": {"height": 10, "margin": {"l": 0, "r": 0, "t": 0, "b": 0},
                                      "xaxis": {"visible": False}, "yaxis": {"visible": False}}},
                          config={"staticPlot": True, "displayModeBar": False}, key="_preload")
    return slot
