"""Take a view home: its numbers as a NumPy .npz blob, and a notebook snippet that recomputes exactly them with
transformer_core's public API.

Arrays: floating tensors as float32; token ids, positions and counts stay int64 (exact); a value a view leaves
undefined (a one-token loss) is NaN.
"""
from __future__ import annotations

import ast
import io
from collections.abc import Mapping

import numpy as np
import torch

from ..errors import InputError
from ..model.hooks import ATTENTION_STAGES
from ..model.trace import AttentionStages
from .heads import CROSS_PATTERNS, PROBE_COUNT, SELF_PATTERNS, HeadRecord
from .next_token import Distribution
from .sinks import Sink

KIND_CODES = {"enc_self": 0, "dec_self": 1, "cross": 2}


def _array(x) -> np.ndarray:
    """float32 for floating data, int64 for integers, bool and text kept."""
    a = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    if a.dtype == np.bool_ or a.dtype.kind == "U":
        return a
    return a.astype(np.int64) if np.issubdtype(a.dtype, np.integer) else a.astype(np.float32)


def arrays_of(result) -> dict[str, np.ndarray]:
    """name -> array of everything a view shows, for any analysis result (and attention stages, distributions)."""
    if isinstance(result, list) and not result:  # nothing found (no sink above the threshold): the fields, empty
        return {"kind": np.zeros(0, np.int64), "layer": np.zeros(0, np.int64), "head": np.zeros(0, np.int64),
                "first_weight": np.zeros(0, np.float32)}
    elif hasattr(result, "arrays"):
        out = result.arrays()
    elif isinstance(result, AttentionStages):
        out = {s: getattr(result, s)[0] for s in ATTENTION_STAGES if getattr(result, s, None) is not None}
    elif isinstance(result, Distribution):
        out = {"ids": result.ids, "logits": result.logits, "probs": result.probs, "raw": result.raw}
    elif isinstance(result, list) and all(isinstance(r, HeadRecord) for r in result):
        patterns = list(dict.fromkeys(SELF_PATTERNS + CROSS_PATTERNS))
        out = {"kind": [KIND_CODES[r.kind] for r in result], "layer": [r.layer for r in result],
               "head": [r.head for r in result]}
        out |= {p: [np.nan if r.scores.get(p) is None else r.scores[p] for r in result] for p in patterns}
    elif isinstance(result, list) and all(isinstance(s, Sink) for s in result):
        out = {"kind": [KIND_CODES[s.kind] for s in result], "layer": [s.layer for s in result],
               "head": [s.head for s in result], "first_weight": [s.first_weight for s in result]}
    else:
        raise TypeError(f"no arrays for {type(result).__name__}")
    return {name: _array(v) for name, v in out.items()}


def npz_bytes(arrays: Mapping[str, object]) -> bytes:
    """A compressed .npz file (np.load reads it) of name -> array."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **{name: _array(v) for name, v in arrays.items()})
    return buf.getvalue()


def export_npz(result, model=None) -> bytes:
    """The .npz blob of one view's result. With the model: beside each array of the model's token ids
    ("ids", "top_ids", ...), NAME_tokenizer (the tokenizer's ids, as the pages show them) and NAME_text (each
    token's text, a part of a character shown with its character, as on the pages). The BPE views' ids are the
    tokenizer's already."""
    arrays = arrays_of(result)
    if model is not None and not getattr(result, "TOKENIZER_IDS", False):
        from ..text.inputs import UNK, real_ids, token_labels

        for name, a in list(arrays.items()):
            if (name == "ids" or name.endswith("_ids")) and a.dtype == np.int64 and a.size:
                flat = a.ravel().tolist()
                real = np.array(real_ids(model, flat), dtype=np.int64).reshape(a.shape)
                arrays[f"{name}_tokenizer"] = np.where(real == UNK, -1, real)
                arrays[f"{name}_text"] = np.array(token_labels(model, flat), dtype=str).reshape(a.shape)
    return npz_bytes(arrays)


# view -> (import line, setup, call with {placeholders}, defaults of the view's own parameters)
HEAD = {"kind": "cross", "layer": 0, "head": 0}
VIEWS: dict[str, tuple[str, str, str, dict]] = {
    "attention": ("", "trace", "trace.attention({kind}, {layer})", {"kind": "cross", "layer": 0}),
    "next_token": ("from transformer_core import distribution", "trace",
                   "distribution(trace.logits_at(-1), top={top})", {"top": 10}),
    "logit_lens": ("from transformer_core.analysis.logit_lens import logit_lens", "prep",
                   "logit_lens(model, prep, k={k})", {"k": 5}),
    "tuned_lens": ("from transformer_core.analysis.tuned_lens import load, shipped_folder, tuned_lens_from_trace",
                   "trace", "tuned_lens_from_trace(model, trace, load(shipped_folder({model}), model), k={k})",
                   {"k": 5}),
    "head_effects": ("from transformer_core.analysis.head_effects import head_effects", "prep",
                     "head_effects(model, prep, {metric}, {token_a}, {token_b}, mode={mode})",
                     {"metric": "logit_diff", "token_a": 0, "token_b": 1, "mode": "zero"}),
    "residual_patch": ("from transformer_core.analysis.head_effects import residual_effects", "two",
                       "residual_effects(model, prep, prep_b, {metric}, {token_a}, {token_b})",
                       {"metric": "logit_diff", "token_a": 0, "token_b": 1}),
    "head_patch": ("from transformer_core.analysis.head_effects import head_patching", "two",
                   "head_patching(model, prep, prep_b, {metric}, {token_a}, {token_b})",
                   {"metric": "logit_diff", "token_a": 0, "token_b": 1}),
    "lens_answer": ("from transformer_core.analysis.logit_lens import answer_row", "trace",
                    "answer_row(model, trace, {position}, {answer})", {"position": 0, "answer": 0}),
    "tuned_lens_answer": ("from transformer_core.analysis.logit_lens import answer_row\n"
                          "from transformer_core.analysis.tuned_lens import load, shipped_folder", "trace",
                          "answer_row(model, trace, {position}, {answer}, load(shipped_folder({model}), model))",
                          {"position": 0, "answer": 0}),
    "attribution": ("from transformer_core.analysis.attribution import direct_logit_attribution", "trace",
                    "direct_logit_attribution(model, trace, {position}, {token})", {"position": 0, "token": 0}),
    "qk_attribution": ("from transformer_core.analysis.qk_attribution import qk_attribution", "trace",
                       "qk_attribution(model, trace, {layer}, {head}, {query}, {key})",
                       {"layer": 0, "head": 0, "query": 0, "key": 0}),
    "flow": ("from transformer_core.analysis.flow import information_flow", "trace",
             "information_flow(model, trace, {position})", {"position": None}),
    "surprise": ("from transformer_core.analysis.surprise import surprise", "prep", "surprise(model, prep)", {}),
    "heads": ("from transformer_core.analysis.heads import detect_heads", "prep",
              "detect_heads(model, prep, threshold={threshold}, length={length}, count={count}, seed={seed})",
              {"threshold": 0.5, "length": None, "count": PROBE_COUNT, "seed": 0}),
    "ablate": ("from transformer_core.analysis.interventions import ablate", "prep",
               "ablate(model, prep, heads={heads}, ffn_layers={ffn_layers}, mode={mode}, top={top})",
               {"heads": [], "ffn_layers": [], "mode": "zero", "top": 10}),
    "patch": ("from transformer_core.analysis.interventions import patch", "two",
              "patch(model, prep, prep_b, {kind}, {layer}, {head}, align={align}, top={top})",
              {**HEAD, "align": "end", "top": 10}),
    "compare": ("from transformer_core.analysis.compare import compare", "two",
                "compare(model, prep, prep_b, {kind}, {layer}, {head}, top={top})", {**HEAD, "top": 10}),
    "sinks": ("from transformer_core.analysis.sinks import find_sinks", "prep",
              "find_sinks(model, prep, threshold={threshold})", {"threshold": 0.5}),
    "remove_sink": ("from transformer_core.analysis.sinks import remove_sink", "prep",
                    "remove_sink(model, prep, {kind}, {layer}, {head}, top={top})", {**HEAD, "top": 10}),
    "model_view": ("from transformer_core.analysis.all_heads import model_view", "prep",
                   "model_view(model, prep.src_ids, prep.tgt_ids, {kind})", {"kind": "cross"}),
    "head_view": ("from transformer_core.analysis.all_heads import head_view", "trace",
                  "head_view(trace.attention({kind}, {layer}).weights, {layer}, {kind})",
                  {"kind": "cross", "layer": 0}),
    "neuron": ("from transformer_core.analysis.neurons import read_neuron, shipped_index", "trace",
               "read_neuron(model, trace, {layer}, {neuron}, shipped_index({model}))", {"layer": 0, "neuron": 0}),
    "bpe_token": ("from transformer_core.analysis.bpe import token_playback", "none",
                  "token_playback({token_id}, {encoding})", {"token_id": 0, "encoding": "cl100k_base"}),
    "bpe_text": ("from transformer_core.analysis.bpe import text_merges", "none", "text_merges({text}, {encoding})",
                 {"text": "d a c b", "encoding": "cl100k_base"}),
}
# setup -> (its parameters with defaults, import line, lines that make model / prep / trace)
INPUTS = {"model": "reverse", "text": "d a c b", "target": "= b c a"}
SETUPS: dict[str, tuple[dict, str, list[str]]] = {
    "none": ({}, "", []),
    "trace": (INPUTS, "from transformer_core import load_model, trace_text",
              ["model, card = load_model({model})", "prep, trace = trace_text(model, {text}, {target})"]),
    "prep": (INPUTS, "from transformer_core import load_model, prepare",
             ["model, card = load_model({model})", "prep = prepare(model, {text}, {target})"]),
    "two": ({**INPUTS, "text_b": "a b c d", "target_b": "= d c b"}, "from transformer_core import load_model, prepare",
            ["model, card = load_model({model})", "prep = prepare(model, {text}, {target})",
             "prep_b = prepare(model, {text_b}, {target_b})"]),
}


def _literal(view: str, name: str, value) -> str:
    """repr of plain data (str, numbers, None, lists / tuples of them) that reads back as the same value."""
    code = repr(value)
    try:
        same = ast.literal_eval(code) == value
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        same = False
    if not same or isinstance(value, (dict, set)) or len(code) > 100_000:
        raise InputError("export_param", view=view, name=str(name)[:40])
    return code


def notebook_snippet(view: str, **params) -> str:
    """Python code (public API only) that recomputes what a view shows; it ends with `result` (what the view's
    function returns) and `arrays` (its numbers, as export_npz writes them). `model` is a load_model key."""
    if view not in VIEWS:
        raise InputError("export_view", view=str(view)[:40], choices=", ".join(VIEWS))
    imports, setup, call, defaults = VIEWS[view]
    inputs, setup_import, setup_lines = SETUPS[setup]
    allowed = {**inputs, **defaults}
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise InputError("export_param", view=view, name=str(unknown[0])[:40])
    lit = {name: _literal(view, name, v) for name, v in {**allowed, **params}.items()}
    top = "from transformer_core import "
    if setup_import and imports.startswith(top):  # one import line for the public API
        setup_import, imports = f"{imports}, {setup_import.removeprefix(top)}", ""
    head = [line for line in (setup_import, imports, "from transformer_core.analysis.export import arrays_of") if line]
    body = [line.format(**lit) for line in setup_lines] + [f"result = {call.format(**lit)}",
                                                          "arrays = arrays_of(result)  # name -> NumPy array"]
    return "\n".join([*head, "", *body]) + "\n"
