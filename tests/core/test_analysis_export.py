"""Export: each view's numbers as .npz bytes, and notebook code that, run on its own, recomputes exactly the
numbers the view's function returns."""
import ast
import io

import numpy as np
import pytest

from transformer_core import InputError, distribution, load_model, prepare, trace_text
from transformer_core.analysis.all_heads import head_view, model_view
from transformer_core.analysis.attribution import direct_logit_attribution
from transformer_core.analysis.bpe import text_merges, token_playback
from transformer_core.analysis.compare import compare
from transformer_core.analysis.export import VIEWS, arrays_of, export_npz, notebook_snippet, npz_bytes
from transformer_core.analysis.flow import information_flow
from transformer_core.analysis.head_effects import head_effects, head_patching, residual_effects
from transformer_core.analysis.heads import detect_heads
from transformer_core.analysis.interventions import ablate, patch
from transformer_core.analysis.logit_lens import answer_row, logit_lens
from transformer_core.analysis.neurons import read_neuron, shipped_index
from transformer_core.analysis.qk_attribution import qk_attribution
from transformer_core.analysis.sinks import find_sinks, remove_sink
from transformer_core.analysis.surprise import surprise
from transformer_core.analysis.tuned_lens import load as load_translators
from transformer_core.analysis.tuned_lens import shipped_folder as tuned_folder
from transformer_core.analysis.tuned_lens import tuned_lens_from_trace

GPT = "preset:tiny-gpt"
TEXT = 'He said "don\'t" \\ twice\nand left {braces}'
OTHER = "She stayed"


def direct(view: str):
    """(snippet parameters, what the view's function returns when called here)."""
    if view in ("bpe_token", "bpe_text"):
        return ({"token_id": 9906}, token_playback(9906)) if view == "bpe_token" else (
            {"text": "Hello 世界 🎉"}, text_merges("Hello 世界 🎉"))
    if view in ("attention", "next_token", "heads", "compare", "remove_sink"):  # a shipped encoder-decoder
        model, _ = load_model("reverse")
        inputs = {"model": "reverse", "text": "d a c b", "target": "= b c a"}
        prep, trace = trace_text(model, "d a c b", "= b c a")
        prep_b = prepare(model, "b a", "= a b")
        calls = {
            "attention": ({"kind": "cross", "layer": 1}, lambda: trace.attention("cross", 1)),
            "next_token": ({"top": 5}, lambda: distribution(trace.logits[0, -1], top=5)),
            "heads": ({"count": 2, "seed": 3}, lambda: detect_heads(model, prep, count=2, seed=3)),
            "compare": ({"text_b": "b a", "target_b": "= a b", "kind": "cross", "layer": 1, "head": 2},
                        lambda: compare(model, prep, prep_b, "cross", 1, 2)),
            "remove_sink": ({"kind": "enc_self", "layer": 0, "head": 3, "top": 4},
                            lambda: remove_sink(model, prep, "enc_self", 0, 3, top=4)),
        }
        params, call = calls[view]
        return {**inputs, **params}, call()
    if view in ("model_view", "head_view"):
        model, _ = load_model("reverse")
        inputs = {"model": "reverse", "text": "d a c b", "target": "= b c a"}
        prep, trace = trace_text(model, "d a c b", "= b c a")
        if view == "model_view":
            return {**inputs, "kind": "enc_self"}, model_view(model, prep.src_ids, prep.tgt_ids, "enc_self")
        return {**inputs, "kind": "dec_self", "layer": 1}, head_view(trace.attention("dec_self", 1).weights, 1,
                                                                      "dec_self")
    if view == "neuron":  # the default model ships a neuron index
        model, _ = load_model("everyday-gpt")
        trace = trace_text(model, TEXT)[1]
        return ({"model": "everyday-gpt", "text": TEXT, "target": None, "layer": 2, "neuron": 7},
                read_neuron(model, trace, 2, 7, shipped_index("everyday-gpt")))
    if view == "attribution":  # a pre-norm decoder (the default model)
        model, _ = load_model("everyday-gpt")
        return ({"model": "everyday-gpt", "text": TEXT, "target": None, "position": 2, "token": 11},
                direct_logit_attribution(model, trace_text(model, TEXT)[1], 2, 11))
    if view == "qk_attribution":  # a pre-norm decoder (the default model)
        model, _ = load_model("everyday-gpt")
        return ({"model": "everyday-gpt", "text": TEXT, "target": None, "layer": 2, "head": 7, "query": 9, "key": 3},
                qk_attribution(model, trace_text(model, TEXT)[1], 2, 7, 9, 3))
    if view == "flow":  # a decoder-only model (the default)
        model, _ = load_model("everyday-gpt")
        return ({"model": "everyday-gpt", "text": TEXT, "target": None, "position": 4},
                information_flow(model, trace_text(model, TEXT)[1], 4))
    if view == "tuned_lens":  # the default ships its translators
        model, _ = load_model("everyday-gpt")
        translators = load_translators(tuned_folder("everyday-gpt"), model)
        assert translators is not None
        return ({"model": "everyday-gpt", "text": TEXT, "target": None, "k": 4},
                tuned_lens_from_trace(model, trace_text(model, TEXT)[1], translators, k=4))
    if view == "residual_patch":
        model, _ = load_model("everyday-gpt")
        a, b = "When Mary and Jack went out, Jack gave a book to", "When Mary and Jack went out, Mary gave a book to"
        return ({"model": "everyday-gpt", "text": a, "target": None, "text_b": b, "target_b": None,
                 "metric": "prob", "token_a": 11, "token_b": None},
                residual_effects(model, prepare(model, a), prepare(model, b), "prob", 11))
    if view == "head_patch":  # answers typed as text, of two tokens each on this model
        model, _ = load_model("everyday-gpt")
        a, b = "When Mary and Jack went out, Mary gave a book to", "When Mary and Jack went out, Jack gave a book to"
        return ({"model": "everyday-gpt", "text": a, "target": None, "text_b": b, "target_b": None,
                 "metric": "logit_diff", "token_a": " Mary", "token_b": " Jack"},
                head_patching(model, prepare(model, a), prepare(model, b), "logit_diff", " Mary", " Jack"))
    if view == "lens_answer":
        model, _ = load_model("everyday-gpt")
        return ({"model": "everyday-gpt", "text": TEXT, "target": None, "position": 3, "answer": " Johnathan"},
                answer_row(model, trace_text(model, TEXT)[1], 3, " Johnathan"))
    if view == "tuned_lens_answer":  # the row through the default's shipped translators
        model, _ = load_model("everyday-gpt")
        translators = load_translators(tuned_folder("everyday-gpt"), model)
        return ({"model": "everyday-gpt", "text": TEXT, "target": None, "position": 3, "answer": " Johnathan"},
                answer_row(model, trace_text(model, TEXT)[1], 3, " Johnathan", translators))
    if view == "head_effects":
        model, _ = load_model("reverse")
        return ({"model": "reverse", "text": "d a c b", "target": "= b c a", "metric": "prob", "token_a": 5,
                 "token_b": None, "mode": "mean"},
                head_effects(model, prepare(model, "d a c b", "= b c a"), "prob", 5, mode="mean"))
    model, _ = load_model(GPT)
    prep, prep_b = prepare(model, TEXT), prepare(model, OTHER)
    inputs = {"model": GPT, "text": TEXT, "target": None}
    calls = {
        "logit_lens": ({"k": 3}, lambda: logit_lens(model, prep, k=3)),
        "surprise": ({}, lambda: surprise(model, prep)),
        "ablate": ({"heads": [("dec_self", 0, 1)], "ffn_layers": [("decoder", 1)], "mode": "mean"},
                   lambda: ablate(model, prep, [("dec_self", 0, 1)], [("decoder", 1)], mode="mean")),
        "patch": ({"text_b": OTHER, "target_b": None, "kind": "dec_self", "layer": 1, "head": 0, "align": "start"},
                  lambda: patch(model, prep, prep_b, "dec_self", 1, 0, align="start")),
        "sinks": ({"threshold": 0.0}, lambda: find_sinks(model, prep, threshold=0.0)),
    }
    params, call = calls[view]
    return {**inputs, **params}, call()


@pytest.mark.parametrize("view", list(VIEWS))
def test_the_notebook_snippet_recomputes_exactly_what_the_view_shows(view):
    params, result = direct(view)
    code = notebook_snippet(view, **params)
    tree = ast.parse(code)
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert imported and all(m.split(".")[0] == "transformer_core" for m in imported)
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Import)]
    ns = {}
    exec(compile(code, f"snippet {view}", "exec"), ns)
    expected = arrays_of(result)
    assert expected and set(ns["arrays"]) == set(expected)
    for name, value in expected.items():
        assert ns["arrays"][name].dtype == value.dtype, name
        assert np.array_equal(ns["arrays"][name], value, equal_nan=value.dtype.kind == "f"), name


@pytest.mark.parametrize("view", ["logit_lens", "sinks", "bpe_text"])
def test_npz_bytes_hold_every_array_as_float32_or_exact_integers(view):
    _, result = direct(view)
    blob = export_npz(result)
    with np.load(io.BytesIO(blob)) as got:
        expected = arrays_of(result)
        assert set(got.files) == set(expected)
        for name in got.files:
            assert got[name].dtype in (np.float32, np.int64, np.bool_)
            assert np.array_equal(got[name], expected[name], equal_nan=True)


def test_npz_bytes_convert_floats_to_float32():
    with np.load(io.BytesIO(npz_bytes({"x": np.arange(3, dtype=np.float64), "n": [1, 2]}))) as got:
        assert got["x"].dtype == np.float32 and got["n"].dtype == np.int64


def test_snippet_parameters_are_plain_data_only():
    with pytest.raises(InputError) as err:
        notebook_snippet("logit_lens", k=object())
    assert err.value.code == "export_param"
    with pytest.raises(InputError) as err:
        notebook_snippet("logit_lens", layer=1)
    assert err.value.code == "export_param"
    with pytest.raises(InputError) as err:
        notebook_snippet("no_such_view")
    assert err.value.code == "export_view" and "logit_lens" in str(err.value)
    code = notebook_snippet("surprise", text="__import__('os').system('x')")
    assert "prepare(model, \"__import__('os').system('x')\"" in code


def test_exports_carry_tokenizer_ids_and_token_text_beside_the_models_ids():
    """The pages show tokenizer ids and characters; an export of model ids carries both beside them."""
    model, _ = load_model("dates-zh")  # a compacted vocabulary: model id != tokenizer id
    prep = prepare(model, "12 March 2024", "=2024年3月12日")
    result = surprise(model, prep)
    with np.load(io.BytesIO(export_npz(result, model))) as got:
        ids = got["ids"]
        assert np.array_equal(got["ids_tokenizer"], np.array([model.cfg.vocab_map[i] for i in ids]))
        assert not np.array_equal(got["ids_tokenizer"], ids)
        text = got["ids_text"]
        assert text.dtype.kind == "U" and "年" in "".join(text.tolist())
    with np.load(io.BytesIO(export_npz(text_merges("Hello 世界"), model))) as got:
        assert "ids_tokenizer" not in got.files  # BPE ids are the tokenizer's already


def test_an_empty_sink_list_exports_its_fields_with_no_rows():
    with np.load(io.BytesIO(export_npz([]))) as got:
        assert set(got.files) == {"kind", "layer", "head", "first_weight"}
        assert all(got[f].shape == (0,) for f in got.files) and got["kind"].dtype == np.int64
