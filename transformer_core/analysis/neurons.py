"""Read one FFN neuron: the snippets of the model's held-out text that excite it most (an index built once from
the held-out samples shipped beside the weights), its activation on the learner's text, and the tokens it writes
towards (its output weights read through the unembedding).

A neuron is one hidden unit of a layer's FFN: its activation is what `ffn_hidden` holds (after the activation
function; for a gated FFN, the gate times the up-projection), and what it adds to the stream is that activation
times its column of the down-projection (linear2).
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import InputError
from ..model.hooks import act_name
from ..model.trace import run_with_trace
from ..model.transformer import Transformer
from ..text.inputs import UNK_LABEL, real_ids, sequence_labels, unknown_id, vocab_index
from ..text.tokenizer import load_encoding, text_around, token_bytes
from ..train.vocab import encode_lines

INDEX_FILE = "neurons.npz"
TOP = 8  # snippets kept per neuron
WINDOW = 6  # tokens shown before the firing token (and 2 after)


@dataclass(frozen=True)
class NeuronIndex:
    """For each layer and neuron, its TOP largest activations over the held-out text and where they were."""

    ids: np.ndarray  # (n_chunks, context) int32 model ids of the held-out text, cut into model-sized chunks
    acts: np.ndarray  # (n_layers, d_ffn, TOP) float16 activations, largest first
    where: np.ndarray  # (n_layers, d_ffn, TOP, 2) int32 (chunk, position)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"ids": self.ids, "acts": self.acts, "where": self.where}


def check_neuron(model: Transformer, layer: int, neuron: int) -> tuple[int, int]:
    if not (isinstance(layer, int) and isinstance(neuron, int) and 0 <= layer < model.cfg.n_layers
            and 0 <= neuron < model.cfg.d_ffn):
        raise InputError("neuron_unknown", last_layer=model.cfg.n_layers - 1, last=model.cfg.d_ffn - 1)
    return layer, neuron


@torch.inference_mode()
def build_index(model: Transformer, texts: list[str], context: int | None = None, top: int = TOP) -> NeuronIndex:
    """Run the decoder over the texts (cut into chunks of the model's context) and keep each neuron's top activations.
    Decoder-only models (the FFNs of the one stack)."""
    if model.is_encoder_decoder:
        raise InputError("neuron_decoder_only")
    from ..text.tokenizer import load_encoding

    enc, ctx = load_encoding(model.cfg.encoding), int(context or model.cfg.max_len)
    stream: list[int] = []
    for text in texts:
        stream += to_model_ids_of(model, encode_lines(enc, text))
    n = len(stream) // ctx
    ids = torch.tensor(stream[: n * ctx], dtype=torch.long).view(n, ctx)  # (C, ctx)
    names = [act_name("ffn_hidden", layer=i) for i in range(model.cfg.n_layers)]
    L, F = model.cfg.n_layers, model.cfg.d_ffn
    best = torch.full((L, F, top), -float("inf"))
    where = torch.zeros((L, F, top, 2), dtype=torch.int32)
    for c in range(n):
        _, trace = run_with_trace(model, ids[c:c + 1], names=names)
        for layer, name in enumerate(names):
            h = trace[name][0].float().T  # (F, ctx)
            vals, pos = h.topk(min(top, ctx), dim=1)  # (F, top)
            merged = torch.cat([best[layer], vals], 1)  # (F, 2·top)
            merged_where = torch.cat([where[layer], torch.stack([torch.full_like(pos, c), pos], -1).int()], 1)
            keep = merged.topk(top, dim=1).indices  # (F, top)
            best[layer] = merged.gather(1, keep)
            where[layer] = merged_where.gather(1, keep[..., None].expand(-1, -1, 2))
    return NeuronIndex(ids.int().numpy(), best.half().numpy(), where.numpy())


def to_model_ids_of(model: Transformer, real: list[int]) -> list[int]:
    """Tokenizer ids -> the model's ids (a compacted vocabulary maps them; byte fallback leaves none unknown)."""
    if not model.cfg.vocab_map:
        return list(real)
    index, unk = vocab_index(model.cfg.vocab_map), unknown_id(model)
    return [index.get(r, unk if unk is not None else 0) for r in real]


def save_index(index: NeuronIndex, folder: Path) -> Path:
    path = Path(folder) / INDEX_FILE
    buf = io.BytesIO()
    np.savez_compressed(buf, **index.arrays())
    path.write_bytes(buf.getvalue())
    return path


def load_index(folder: Path) -> NeuronIndex | None:
    """The index shipped beside a model's weights, or None when it has none."""
    path = Path(folder) / INDEX_FILE
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as z:
        return NeuronIndex(z["ids"], z["acts"], z["where"])


@dataclass(frozen=True)
class Snippet:
    activation: float
    tokens: list[str]  # the window's tokens as the pages show them
    fire: int  # index of the firing token in `tokens`
    before: str  # the text before and after the firing token, whole characters (text_around)
    after: str


def top_snippets(model: Transformer, index: NeuronIndex, layer: int, neuron: int) -> list[Snippet]:
    """The held-out snippets that excite this neuron most, largest first."""
    layer, neuron = check_neuron(model, layer, neuron)
    enc, out = load_encoding(model.cfg.encoding), []
    for act, (chunk, pos) in zip(index.acts[layer, neuron], index.where[layer, neuron], strict=True):
        if not np.isfinite(act):
            continue
        lo, hi = max(0, int(pos) - WINDOW), min(index.ids.shape[1], int(pos) + 3)
        ids = index.ids[int(chunk), lo:hi].tolist()
        raws = [token_bytes(enc, i) or UNK_LABEL.encode() for i in real_ids(model, ids)]
        before, after = text_around(raws, int(pos) - lo)
        out.append(Snippet(float(act), sequence_labels(model, ids), int(pos) - lo, before, after))
    return out


def output_tokens(model: Transformer, layer: int, neuron: int, k: int = 10) -> tuple[list[tuple[int, float]],
                                                                                     list[tuple[int, float]]]:
    """(tokens it pushes up, tokens it pushes down): its column of the down-projection read through the output layer
    (W_U · w_out, through the final norm's gain when there is one; the direct effect of a unit activation)."""
    layer, neuron = check_neuron(model, layer, neuron)
    w_out = model.decoder.layers[layer].ffn.linear2.weight[:, neuron].detach().float()  # (d,)
    norm = model.decoder.norm
    if hasattr(norm, "weight") and norm.weight is not None:
        w_out = w_out * norm.weight.detach().float()
    logits = model.out.weight.detach().float() @ w_out  # (vocab,)
    up, down = logits.topk(k), (-logits).topk(k)
    return ([(int(i), float(v)) for v, i in zip(up.values, up.indices, strict=True)],
            [(int(i), -float(v)) for v, i in zip(down.values, down.indices, strict=True)])


def neuron_on_text(trace, layer: int, neuron: int) -> np.ndarray:
    """(T,) this neuron's activation at every position of the traced text."""
    return trace[act_name("ffn_hidden", layer=layer)][0, :, neuron].float().numpy()


@dataclass(frozen=True)
class NeuronReading:
    """Everything the FFN page shows about one decoder neuron: its activation on the learner's text, the held-out
    snippets that excite it most (when the model ships a neuron index), and the tokens its output pushes up and down
    (decoder-only models)."""

    layer: int
    neuron: int
    on_text: np.ndarray | None  # (T,)
    snippets: list[Snippet]
    up: list[tuple[int, float]]  # (model id, logit change per unit activation), largest first
    down: list[tuple[int, float]]

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"layer_neuron": np.array([self.layer, self.neuron]),
               "snippet_activation": np.array([s.activation for s in self.snippets], dtype=np.float32),
               "snippet_before": np.array([s.before for s in self.snippets], dtype=str),
               "snippet_token": np.array([s.tokens[s.fire] for s in self.snippets], dtype=str),
               "snippet_after": np.array([s.after for s in self.snippets], dtype=str),
               "up_ids": np.array([i for i, _ in self.up], dtype=np.int64),
               "up_logit": np.array([v for _, v in self.up], dtype=np.float32),
               "down_ids": np.array([i for i, _ in self.down], dtype=np.int64),
               "down_logit": np.array([v for _, v in self.down], dtype=np.float32)}
        if self.on_text is not None:
            out["on_text"] = self.on_text
        return out


def read_neuron(model: Transformer, trace, layer: int, neuron: int, index: NeuronIndex | None = None,
                k: int = 10) -> NeuronReading:
    """One decoder neuron read three ways (see NeuronReading); `index`: load_index of the model's folder, or None."""
    layer, neuron = check_neuron(model, layer, neuron)
    up, down = ([], []) if model.is_encoder_decoder else output_tokens(model, layer, neuron, k)
    return NeuronReading(layer, neuron, neuron_on_text(trace, layer, neuron),
                         top_snippets(model, index, layer, neuron) if index is not None else [], up, down)


def shipped_index(name: str) -> NeuronIndex | None:
    """The neuron index shipped beside a model of assets/models (None when it has none)."""
    from ..sources import Places

    return load_index(Places().shipped_dir / name)


def index_folder(model, folder: Path) -> Path:
    """Index a model's FFN neurons over the held-out samples shipped in its folder, in file-name order (the build
    and `python -m transformer_core.train.neuron_index` write the same file); returns the index's path."""
    texts = [p.read_text(encoding="utf-8") for p in sorted(folder.glob("heldout_*.txt"))]
    return save_index(build_index(model, texts), folder)
