"""What app.py does around every script run: the preload chart, and the process's garbage collection.

This module imports nothing but Streamlit, so app.py can use it before any import of ours.
- The server's first run (torch not imported yet) sends the preload chart at once, so the browser fetches and
  evaluates plotly.js (0.7 s of its time) while the server imports torch, and it runs with the collector off:
  a collection of the 150,000 freshly imported objects cost that run 0.1 s (bench/cold_start.py).
- After the first completed run, every object alive (torch, plotly, Streamlit, our modules) is frozen out of
  the collector's sight, so each later collection scans only what sessions made since.
- Every run leaves a hidden line of text in each web font the pages use (`warm_fonts`), so the browser loads them
  all early: plotly.js draws a chart again when a font finished loading while it drew.
- A collection of the young generations every tenth run replaces Streamlit's full collection after each run
  (runner.postScriptGC, off in .streamlit/config.toml: 38% of the server's CPU under 20 learners). A rerun
  interrupts the script with an exception whose frames can hold tensors in reference cycles, and Python's own
  schedule counts objects, not bytes. A full collection comes every FULL_EVERY runs, or sooner once the process
  has grown by FULL_GROWTH bytes since the last (a cycle that aged into the oldest generation): under 20 learners
  a young collection took 1-5 ms and a full one 75-145 ms, every thread waiting (the interpreter lock is held).
"""
import gc
import itertools
import os
import sys

import streamlit as st

COLLECT_EVERY = 10  # runs (of any session) between two collections of the young generations
FULL_EVERY = 200  # runs between two full collections, at the most
FULL_GROWTH = 256 * 2**20  # bytes of resident memory gained since the last full collection that bring the next
_RUNS = itertools.count(1)
_last_full = {"rss": 0}


def resident_bytes() -> int:
    """The process's resident memory (0 where /proc is not there: then only FULL_EVERY brings a full one)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def collect(run: int) -> None:
    """Every COLLECT_EVERY runs: the young generations, or everything when it is time (see the module's note)."""
    rss = resident_bytes()
    if run % FULL_EVERY == 0 or rss - _last_full["rss"] > FULL_GROWTH:
        gc.collect()
        _last_full["rss"] = resident_bytes()
    else:
        gc.collect(1)


def first_run() -> bool:
    """Whether the server has not imported torch yet: its first run (or the few that browsers start at once).
    A lookup, not gc.get_freeze_count(), which walks every frozen object (10 ms on each run under load)."""
    return "torch" not in sys.modules


def begin() -> bool:
    """Call first in each run: counts it (a collection every COLLECT_EVERY runs) and, in the server's first run,
    turns the collector off. Returns whether it did; hand that to end()."""
    if (run := next(_RUNS)) % COLLECT_EVERY == 0:
        collect(run)
    starting = first_run()
    if starting:
        gc.disable()
    return starting


def end(starting: bool) -> None:
    """Call last in each run, however it ends (finally): the collector back on after the first run."""
    if starting:
        gc.enable()


@st.cache_resource(show_spinner=False)
def freeze_startup_heap() -> bool:
    """Once per server process, after a run that got to the end (the page sent: no learner waits for it)."""
    gc.collect()  # only live objects are frozen, no garbage
    gc.freeze()
    _last_full["rss"] = resident_bytes()
    return True


def preload_charts():
    """On a browser's first run only: an empty, invisible chart; returns its slot, to clear once the page is on
    its way. Without it the first page's picture appeared 1.5 s after its title (bench/cold_start.py)."""
    slot = st.empty()
    if not st.session_state.get("_charts_preloaded"):
        st.session_state._charts_preloaded = True
        with slot.container():
            if first_run():  # the server is starting: no blank page while torch and the model load
                st.caption(f":material/hourglass_top: {starting_text()}")
            st.plotly_chart({"data": [{"type": "scatter", "x": [], "y": []}],
                             "layout": {"height": 10, "margin": {"l": 0, "r": 0, "t": 0, "b": 0},
                                        "xaxis": {"visible": False}, "yaxis": {"visible": False}}},
                            config={"staticPlot": True, "displayModeBar": False}, key="_preload")
    return slot


def starting_text() -> str:
    """The "server is starting" line in the learner's language (the sidebar has not set it yet)."""
    from ui.i18n import link_lang, strings  # Streamlit only

    return strings()["app_starting"][st.session_state.get("lang") or link_lang()]


# Text in each web font the pages use, laid out but never seen, so the browser loads every font once, early. A chart
# drawn while a font is loading is drawn again when it has loaded (plotly.js redraws after document.fonts settle:
# the FFN and embeddings pages drew 11 times for 5-6 charts on a first visit, 6 with the fonts loaded).
FONT_WARMER = ('<div aria-hidden="true" style="position:absolute;width:1px;height:1px;overflow:hidden;'
               'visibility:hidden">' + "".join(
                   f'<span style="font-family:{family};font-style:{style}">Aa(</span>'
                   for family, style in (("Source Sans", "normal"), ("Source Sans", "italic"),
                                         ("Source Code Pro", "normal"), ("KaTeX_Main", "normal"),
                                         ("KaTeX_Math", "italic"), ("KaTeX_Size1", "normal"),
                                         ("KaTeX_Size2", "normal"), ("KaTeX_Size3", "normal"))) + "</div>")


def warm_fonts() -> None:
    """At the sidebar's foot, each run (the same element each time: Streamlit sends nothing new)."""
    st.sidebar.html(FONT_WARMER)
