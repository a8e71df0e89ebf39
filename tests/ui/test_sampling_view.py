"""The Logits page's temperature, top-k and top-p in the browser (ui.sampling_view): what the page sends the browser
is the chosen position's whole row of logits and its top tokens, as the core computes them, and nothing the three
values change; the values the browser tells the server are taken as a link's are, and "Next token" samples with them.
The browser's side (sampling.js) is tested in Chromium: tests/browser/test_browser_views.py."""
import base64
import json
from contextlib import contextmanager
from unittest.mock import patch

import numpy as np
import torch

from harness.apptest import CAT, DEFAULT, open_app
from transformer_core.analysis.next_token import Sampling, generate
from transformer_core.text.inputs import real_ids, token_labels, unknown_id
from ui import sampling_view
from ui.figures import ranked_labels, visible

TEXT = CAT


def view(at) -> dict:
    [element] = at.get("bidi_component")
    return json.loads(element.proto.json)


def row_of(data: dict) -> np.ndarray:
    return np.frombuffer(base64.b64decode(data["row"]), dtype="<f4")


def test_the_browser_gets_the_positions_whole_row_and_its_top_tokens_as_the_core_computes_them(cat_trace):
    model, prep, trace = cat_trace
    at = open_app("logits", model=DEFAULT, text=TEXT)
    assert not at.exception and not at.error
    data = view(at)
    expected = trace.logits_at(prep.src_ids.shape[1] - 1).float()
    assert np.array_equal(row_of(data), expected.numpy())  # bit for bit: the numbers the browser computes from
    order = torch.topk(expected, 100).indices.tolist()
    dec = prep.src_ids[0].tolist()
    names = token_labels(model, order, dec)
    assert [x["index"] for x in data["top"]] == order
    assert [x["id"] for x in data["top"]] == real_ids(model, order)
    assert [x["label"] for x in data["top"]] == [visible(n) for n in names]
    assert [x["rank"] for x in data["top"]] == ranked_labels(names)
    assert data["shown"] == 10 and not {"T", "k", "p"} & set(data)  # the browser holds those (sent once per row)
    unk = unknown_id(model)
    assert data["banned"] == ([unk] if unk is not None else [])
    assert "{p}" in data["look"] and "‘ mat’" not in data["look"]  # the browser fills in the probability
    assert data["vocab"] == model.cfg.vocab_size
    # no server-side distribution beside it: the browser draws it
    assert not [c for c in at.get("plotly_chart") if c.proto.id.endswith("-log_probs")]


def test_values_the_browser_tells_the_server_are_kept_and_next_token_samples_with_them(cat_trace):
    model, prep, _ = cat_trace
    at = open_app("logits", model=DEFAULT, text=TEXT, seed="7")
    at.radio(key="log_greedy").set_value(False).run()
    first = view(at)
    with patch_state(at) as ss:  # what the view's "rule" callback does with the values the browser sent
        sampling_view.adopt({"T": 0.5, "k": 3, "p": 0.9})
        assert (ss["log_T"], ss["log_topk"], ss["log_topp"]) == (0.5, 3, 0.9)
    at.button(key="log_next").click().run()
    assert not at.exception and not at.error
    unk = unknown_id(model)
    rule = Sampling(temperature=0.5, top_k=3, top_p=0.9, banned=(unk,) if unk is not None else ())
    assert list(at.session_state["gen_ids"]) == generate(model, prep.src_ids[0].tolist(), 1, rule, seed=7)
    assert (at.query_params["T"], at.query_params["k"], at.query_params["p"]) == ("0.5", "3", "0.9")  # the link
    assert view(at)["row"] != first["row"]  # the next position's row (the new token's)


def test_a_bad_value_from_the_browser_leaves_the_setting_as_it_was():
    state = {"log_T": 0.7, "log_topk": 0, "log_topp": 1.0}
    with patch_dict(state):
        for bad in ({"T": "nan", "k": -4, "p": 7}, {"T": float("inf")}, "0.5", None, {"T": [1]}, {"p": 0}):
            sampling_view.adopt(bad)
            assert state == {"log_T": 0.7, "log_topk": 0, "log_topp": 1.0}, bad
        sampling_view.adopt({"T": "2.5", "p": "0.25"})  # what is good is taken, what is missing stays
        assert state == {"log_T": 2.5, "log_topk": 0, "log_topp": 0.25}


def patch_state(at):
    return patch_dict(at.session_state)


@contextmanager
def patch_dict(state):
    """st.session_state as `state` inside ui.sampling_view (its callback runs in a script run, not a test)."""
    with patch.object(sampling_view.st, "session_state", state):
        yield state
