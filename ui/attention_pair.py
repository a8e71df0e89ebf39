"""The Attention page's scores before and after masking, side by side, drawn in the browser (static/views/attention.js,
data.role "pair"): the chosen head's scaled scores q·k/√d_k once, each to the 4 decimals the hover shows, and the
mask as bits; the browser draws both maps on one colour scale, the masked cells grey after masking (an ✕ on each of a
small map's, ui.masked_cells.marks_masked). Two plotly charts carried the same map twice (about 28 KB of the 40 KB
the run after a switch sent at 64 tokens, over 100 KB at 128); this carries it once, in about 10 KB at 64 tokens
(about 2.3 bytes a score: the entropy of a score to 4 decimals). A longer text sends a window of its map (the page's
slider picks where)."""
from __future__ import annotations

from functools import cache

import numpy as np
from plotly.colors import get_colorscale

from .figures import DIVERGING
from .i18n import t
from .masked_cells import MASK_COLOUR, marks_masked
from .views import b64, component, keys
from .widgets import picture_download

PAIR_KEY = "attention_pair"
_pair = component(PAIR_KEY, "attention")
NOT_A_NUMBER = -(2**31)  # the code of a score that is no number (a broken checkpoint's) or past ±214,748.3647


def encode(scaled: np.ndarray) -> bytes:
    """(Tq, Tk) float32 scores, row by row, each as the int32 10⁴ × its value to 4 decimals (float32 × 10⁴ is exact in
    float64 and rint rounds as "%.4f" does; NOT_A_NUMBER where it cannot be one), as 4 planes of bytes, the lowest
    first: the high planes repeat, which the websocket's compression packs (a 58 × 58 map: about 7.6 KB on the wire,
    against 13 KB as float32)."""
    four = np.rint(np.asarray(scaled, dtype=np.float64) * 1e4)
    with np.errstate(invalid="ignore"):
        fine = np.isfinite(four) & (np.abs(four) < 2**31)
    return np.where(fine, four, NOT_A_NUMBER).astype("<i4").reshape(-1, 1).view(np.uint8).T.tobytes()


def decode(raw: bytes, n_q: int, n_k: int) -> np.ndarray:
    """`encode`'s bytes back to (Tq, Tk) scores to 4 decimals, NaN for NOT_A_NUMBER (what attention.js draws)."""
    planes = np.frombuffer(raw, dtype=np.uint8).reshape(4, -1)
    codes = np.ascontiguousarray(planes.T).view("<i4").reshape(n_q, n_k)
    return np.where(codes == NOT_A_NUMBER, np.nan, codes / 1e4)


@cache
def stops() -> tuple[str, ...]:
    """The other charts' diverging colours (ui.figures.DIVERGING), evenly spaced, as #rrggbb."""
    scale = get_colorscale(DIVERGING)
    assert np.allclose([p for p, _ in scale], np.linspace(0, 1, len(scale)))  # attention.js spaces them evenly
    rgb = [[int(v) for v in c[c.index("(") + 1:-1].split(",")] for _, c in scale]
    return tuple("#" + "".join(f"{v:02x}" for v in c) for c in rgb)


def pair_data(scaled: np.ndarray, mask: np.ndarray, q_lab: list[str], k_lab: list[str], *,
              view: str | None = None) -> dict:
    """What the browser draws the pair with: the scores (`encode`), the mask (1 = kept, numpy.packbits little-endian),
    the colour scale's reach (the largest |score|, one scale for both), whether masked cells get an ✕, the axis
    labels, the colours, how each chart downloads and the words. Where the page's view draws the same map (`view`: the
    key of its text and block, ui.attention_view), the labels are the view's and are not sent again ("from_view": that
    key; 0.4 KB on the wire at 64 tokens, in every run after a switch)."""
    scaled, mask = np.asarray(scaled), np.asarray(mask, dtype=bool)
    marks = bool(marks_masked(mask))
    grey = bool((~mask).any()) and not marks  # masked cells of a larger map are grey only (no ✕): the title says so
    charts = {}
    for key in ("before", "after"):
        fmt, stem = picture_download(f"att_{key}")
        charts[key] = {"format": fmt, "file": f"{stem}.{fmt}"}
    return {
        "role": "pair", "n_q": len(q_lab), "n_k": len(k_lab), "scores": b64(encode(scaled)),
        "mask": b64(np.packbits(mask, axis=None, bitorder="little").tobytes()),
        "lim": float(np.abs(scaled[np.isfinite(scaled)]).max(initial=0)) or 1.0, "marks": marks,
        "from_view": view, "q": None if view else list(q_lab), "k": None if view else keys(q_lab, k_lab),
        "colours": {"scale": list(stops()), "masked": MASK_COLOUR, "mark": "#555"}, "chart": charts,
        "text": {"before": t("att_before"), "after": t("att_after_grey" if grey else "att_after"),
                 "queries": t("attn_queries"), "keys": t("attn_keys"), "masked": t("att_masked_hover"),
                 "download_chart": t("chart_download", fmt=charts["before"]["format"].upper()),
                 "load_failed": t("view_load_failed")},
    }


def attention_pair(data: dict) -> None:
    """Draw the pair (its key keeps the browser's element across the page's runs)."""
    _pair(key=PAIR_KEY, data=data, height="content")
