"""The Logits page's temperature, top-k and top-p, answered in the browser: one component (st.components.v2, its
script in static/views/sampling.js) holds the chosen position's whole row of logits (float32) and redraws the
distribution at each change with the rule of transformer_core.analysis.next_token, before the server hears of it.

The browser then tells the server the three values (the component's state "rule"): a run of the page's distribution
fragment takes them (`adopt`), records them in the link and keeps them for "Next token". That run sends little: the
view's data holds nothing the three values change, so Streamlit's browser, which keeps any element of 10 KB or more
it has seen, is sent a reference to it instead of the row again. On a new page the view starts from the link.

A vocabulary larger than BROWSER_VOCAB keeps the server's distribution (a fragment): its row would be too heavy
for a room on shared Wi-Fi (100,277 float32 logits are 400 KB)."""
from __future__ import annotations

import streamlit as st
import torch

from service import urlstate

from .figures import ranked_labels, visible
from .i18n import t
from .state import URL_STATE
from .views import b64, component
from .widgets import picture_download

BROWSER_VOCAB = 16_384  # the default model's 12,293 logits: 48 KB of float32 (66 KB as base64, less compressed)
_view = component("sampling_view", "sampling")
MAX_SHOWN = 100  # the page's "tokens shown" goes up to this
KEY = "sampling_view"
RULE_KEYS = {name: URL_STATE[name] for name in ("T", "k", "p")}  # the view's names (the link's) -> session keys
# the temperature's and top-p's (default, lowest, highest, step): the page's sliders, its clamps and the view's
RANGES = {"T": (1.0, 0.05, 5.0, 0.05), "p": (1.0, 0.01, 1.0, 0.01)}


class _Slot:
    """Formats as "{p}" whatever the format spec: the browser fills in the probability it computes."""

    def __format__(self, spec: str) -> str:
        return "{p}"


def in_browser(vocab: int) -> bool:
    return vocab <= BROWSER_VOCAB


def view_data(row: torch.Tensor, labels: list[str], real_ids: list[int], order: list[int], *,
              banned: tuple[int, ...], shown: int, look: dict | None) -> dict:
    """What the browser gets: the (vocab,) row as base64 float32, the top MAX_SHOWN tokens by logit (their index in
    the row, id, label as the table shows it, label as the bars rank it, logit), the ids ruled out, how many tokens
    to show, how the chart downloads (the sidebar's format, a file name like the other charts') and the page's
    words. Not the temperature, top-k or top-p: the browser holds those (see the module)."""
    logits = row.detach().float().cpu().numpy().astype("<f4")  # (vocab,)
    fmt, stem = picture_download("log_probs")
    return {
        "chart": {"format": fmt, "file": f"{stem}.{fmt}"}, "ranges": RANGES,
        "row": b64(logits.tobytes()), "vocab": int(logits.size),
        "top": [{"index": int(i), "id": int(r), "label": visible(lab), "rank": rank, "logit": float(logits[i])}
                for i, r, lab, rank in zip(order, real_ids, labels, ranked_labels(labels), strict=True)],
        "banned": [int(b) for b in banned], "shown": int(shown),
        "look": t("look_logits", **look, p=_Slot()) if look else None,
        "help": {"T": t("log_temperature_help"), "k": t("log_topk_help"), "p": t("log_topp_help")},
        "text": {"load_failed": t("view_load_failed"),
                 "temperature": t("log_temperature"), "topk": t("log_topk"), "topp": t("log_topp"),
                 "entropy": t("log_entropy"), "sum": t("log_sum"), "kept": t("log_kept"), "chart": t("log_chart"),
                 "table": t("log_table"), "token": t("col_token"), "id": t("col_id"), "logit": t("col_logit"),
                 "prob": t("col_prob"), "raw": t("col_prob_raw"),
                 "download": t("download_csv"), "download_chart": t("chart_download", fmt=fmt.upper())},
    }


def adopt(rule: object) -> None:
    """Take the values the browser set (its state "rule": {"T", "k", "p"}), each checked as a link's value is; one
    that is missing or bad leaves the page's value as it was."""
    if not isinstance(rule, dict):
        return
    asked = {name: str(rule[name]) for name in RULE_KEYS if name in rule}
    values, notices = urlstate.parse(asked)
    refused = {n.params.get("name") for n in notices}  # a bad value parses as the default: not the learner's
    for name in asked:
        if values[name] is not None and name not in refused:
            st.session_state[RULE_KEYS[name]] = values[name]


def _on_rule() -> None:
    adopt((st.session_state.get(KEY) or {}).get("rule"))


def sampling_view(data: dict) -> None:
    """Draw the view (its key keeps the browser's element, and the values set there, across the page's runs)."""
    _view(key=KEY, data=data, height="content", on_rule_change=_on_rule)
