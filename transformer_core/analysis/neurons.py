"""Read one FFN neuron as Neuronpedia does: the places in the model's held-out text that excite it most, each with
its context shaded by the neuron's activation on every token, the distribution of its activation over all those
tokens, its activation on the learner's text, the tokens it writes towards (its output weights read through the
unembedding), and the reverse question: which neurons fire most on a given token.

A neuron is one hidden unit of a layer's FFN: its activation is what `ffn_hidden` holds (after the activation
function; for a gated FFN, the gate times the up-projection), and what it adds to the stream is that activation
times its column of the down-projection (linear2).

The index (neurons.npz beside the weights, built once from the held-out samples shipped there) keeps per neuron only
the positions and values of its TOP largest activations and a histogram of all of them, plus, per held-out token, the
neurons with the largest mean and largest max activation on it; the shaded contexts are recomputed when shown, by a
forward over just the chunks those positions are in (the index stays small: about 1-2 MB per model).
"""
from __future__ import annotations

import io
import unicodedata
import zipfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from ..errors import InputError
from ..model.hooks import act_name
from ..model.trace import run_with_trace
from ..model.transformer import Transformer
from ..text.inputs import UNK_LABEL, real_ids, sequence_labels, token_labels, unknown_id, vocab_index
from ..text.tokenizer import _group_tokens, encode_by_line, load_encoding, text_around, token_bytes
from ..train.vocab import encode_lines

INDEX_FILE = "neurons.npz"
INDEX_VERSION = 2  # an older file (8 snippets, no histogram, no token search) reads as no index
TOP = 24  # examples kept per neuron
BEFORE, AFTER = 16, 8  # tokens of context before and after the firing token (a window of 25, shifted at a chunk edge)
EXTEND = 4  # tokens a window may grow by at either edge so that it starts and ends on a whole word
BINS = 40  # the histogram's bins, between the neuron's smallest and largest held-out activation
SEARCH_TOP = 10  # neurons kept per held-out token for the search, by mean and by max activation
SEARCH_MAX_CHARS = 40  # a searched token or word
BATCH = 16  # chunks per forward while building


@dataclass(frozen=True)
class NeuronIndex:
    """Each FFN neuron's largest activations over the model's held-out text, the histogram of all of them, and per
    held-out token the neurons that fire most on it. The held-out text is cut into chunks of the model's context
    (one forward each); a file's last chunk ends at its last token and overlaps the chunk before it, and each token
    is counted once (from `owned` on)."""

    ids: np.ndarray  # (C, T) int32 model ids of the held-out text, chunk by chunk
    owned: np.ndarray  # (C,) int32 first position of each chunk the index counts
    acts: np.ndarray  # (L, F, TOP) float16 each neuron's largest activations, largest first
    pos: np.ndarray  # (L, F, TOP) int32 where they are: chunk · T + position
    hist: np.ndarray  # (L, F, BINS) uint16 / uint32 counts of its activation over every counted token
    hist_range: np.ndarray  # (L, F, 2) float32 the histogram's range: the neuron's smallest and largest activation
    positive: np.ndarray  # (L, F) uint16 / uint32 counted tokens where its activation is above 0
    vocab: np.ndarray  # (U,) int32 model ids of the tokens the counted text holds, ascending
    vocab_count: np.ndarray  # (U,) int32 how often each occurs
    by_mean: np.ndarray  # (U, SEARCH_TOP) neurons (layer · F + neuron) with the largest mean activation on it
    mean: np.ndarray  # (U, SEARCH_TOP) float16 those means
    by_max: np.ndarray  # (U, SEARCH_TOP) neurons with the largest max activation on it
    max: np.ndarray  # (U, SEARCH_TOP) float16 those maxima

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @cached_property
    def where(self) -> np.ndarray:
        """(L, F, TOP, 2) (chunk, position) of each neuron's largest activations."""
        pos = self.pos.astype(np.int64)
        return np.stack([pos // self.ids.shape[1], pos % self.ids.shape[1]], -1)

    @cached_property
    def counted(self) -> np.ndarray:
        """(C, T) bool: the positions the index counts (each held-out token once)."""
        return np.arange(self.ids.shape[1])[None, :] >= self.owned[:, None]

    @property
    def n_tokens(self) -> int:
        """Held-out tokens counted (what every neuron's histogram sums to)."""
        return int(self.ids.shape[1] * len(self.owned) - self.owned.astype(np.int64).sum())


def check_neuron(model: Transformer, layer: int, neuron: int) -> tuple[int, int]:
    if not (isinstance(layer, int) and isinstance(neuron, int) and 0 <= layer < model.cfg.n_layers
            and 0 <= neuron < model.cfg.d_ffn):
        raise InputError("neuron_unknown", last_layer=model.cfg.n_layers - 1, last=model.cfg.d_ffn - 1)
    return layer, neuron


def chunks_of(streams: list[list[int]], context: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids (C, T), owned (C,)): each stream (one held-out file) cut into chunks of T = context tokens, its last chunk
    ending at its last token (overlapping the one before; `owned`: where its new tokens start). A stream shorter than
    T joins the next one; T shrinks to the whole text when that is shorter."""
    docs, current = [], []
    for stream in streams:
        current = current + list(stream)
        if len(current) >= context:
            docs.append(current)
            current = []
    if current:
        if docs:
            docs[-1] = docs[-1] + current
        else:
            docs.append(current)
    T = min(context, min((len(d) for d in docs), default=0))
    if T < 1:
        raise InputError("neuron_no_text")
    rows, owned = [], []
    for doc in docs:
        n = len(doc)
        for start in range(0, n - T + 1, T):
            rows.append(doc[start:start + T])
            owned.append(0)
        if n % T:
            rows.append(doc[n - T:])
            owned.append(T - n % T)
    return np.asarray(rows, dtype=np.int32), np.asarray(owned, dtype=np.int32)


def _activations(model: Transformer, ids: np.ndarray, layers: list[int]):
    """Yield (first chunk, {layer: (B, T, F) float32 ffn_hidden}) over the chunks, BATCH at a time."""
    names = [act_name("ffn_hidden", layer=i) for i in layers]
    for b in range(0, len(ids), BATCH):
        _, trace = run_with_trace(model, torch.as_tensor(ids[b:b + BATCH], dtype=torch.long), names=names,
                                  stop_early=True)
        yield b, {layer: trace[name].float() for layer, name in zip(layers, names, strict=True)}


def top_earliest(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, indices) (R, k) of the k largest entries of each row of x (R, n), largest first and, among equal
    values, the earlier index first (torch.topk leaves ties in no set order; a full stable sort is slow)."""
    k = min(k, x.size(1))
    th = x.topk(k, dim=1).values[:, -1:]  # (R, 1) the k-th largest value
    above = x > th
    equal = x == th
    room = k - above.sum(1, keepdim=True)  # (R, 1) places left for values equal to the threshold
    chosen = above | (equal & (equal.cumsum(1) <= room))  # exactly k per row
    idx = chosen.nonzero()[:, 1].view(-1, k)  # (R, k) ascending index
    vals = x.gather(1, idx)
    order = torch.sort(vals, dim=1, descending=True, stable=True).indices
    return vals.gather(1, order), idx.gather(1, order)


def _bins(h: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """The histogram bin (0 … BINS-1) of activations h (n, F) for each neuron's range [lo, hi] (F,)."""
    width = torch.where(hi > lo, hi - lo, torch.ones_like(hi))
    return ((h - lo) / width * BINS).floor().clamp(0, BINS - 1).long()


@torch.inference_mode()
def build_index(model: Transformer, texts: list[str], context: int | None = None, top: int = TOP) -> NeuronIndex:
    """Run the decoder over the texts (each cut into chunks of the model's context) and keep, per neuron, its `top`
    largest activations (ties: the earlier position first) and a histogram of all of them, and per token the neurons
    with the largest mean and max activation on it. Two passes: the second counts the histogram in the range the
    first found. Decoder-only models (the FFNs of the one stack)."""
    if model.is_encoder_decoder:
        raise InputError("neuron_decoder_only")
    enc = load_encoding(model.cfg.encoding)
    streams = [to_model_ids_of(model, encode_lines(enc, text)) for text in texts if text.strip()]
    ids, owned = chunks_of(streams, int(context or model.cfg.max_len))
    C, T = ids.shape
    L, F = model.cfg.n_layers, model.cfg.d_ffn
    counted = torch.as_tensor(np.arange(T)[None, :] >= owned[:, None])  # (C, T)
    flat = torch.arange(C * T, dtype=torch.int64).view(C, T)
    vocab, token_u = np.unique(ids[counted.numpy()], return_inverse=True)  # (U,), (N,) in counted order
    token_u, U = torch.as_tensor(token_u), len(vocab)
    best = torch.full((L, F, top), -float("inf"))
    best_pos = torch.zeros((L, F, top), dtype=torch.int64)
    lo, hi = torch.full((L, F), float("inf")), torch.full((L, F), -float("inf"))
    positive = torch.zeros((L, F), dtype=torch.int64)
    sums = torch.zeros((L, U, F), dtype=torch.float64)
    maxes = torch.full((L, U, F), -float("inf"))
    seen = 0  # counted tokens before this batch
    for b, by_layer in _activations(model, ids, list(range(L))):
        mask = counted[b:b + BATCH]  # (B, T)
        where = flat[b:b + BATCH][mask]  # (n,) ascending
        u = token_u[seen:seen + len(where)]
        seen += len(where)
        for layer, h in by_layer.items():
            hv = h[mask]  # (n, F) counted positions, in text order
            vals, idx = top_earliest(hv.T, top)  # (F, k)
            merged = torch.cat([best[layer], vals], 1)  # (F, top + k): earlier positions first, so ties keep them
            order = torch.sort(merged, dim=1, descending=True, stable=True).indices[:, :top]  # (F, top)
            best[layer] = merged.gather(1, order)
            best_pos[layer] = torch.cat([best_pos[layer], where[idx]], 1).gather(1, order)
            lo[layer] = torch.minimum(lo[layer], hv.min(0).values)
            hi[layer] = torch.maximum(hi[layer], hv.max(0).values)
            positive[layer] += (hv > 0).sum(0)
            sums[layer].index_add_(0, u, hv.double())
            maxes[layer].scatter_reduce_(0, u[:, None].expand(-1, F), hv, "amax")
    hist = torch.zeros((L, F * BINS), dtype=torch.int64)
    offsets = torch.arange(F) * BINS  # (F,)
    for b, by_layer in _activations(model, ids, list(range(L))):
        for layer, h in by_layer.items():
            binned = _bins(h[counted[b:b + BATCH]], lo[layer], hi[layer]) + offsets  # (n, F)
            hist[layer] += torch.bincount(binned.flatten(), minlength=F * BINS)
    count = torch.as_tensor(np.bincount(token_u.numpy(), minlength=U))  # (U,)
    means = (sums / count[None, :, None]).float().permute(1, 0, 2).reshape(U, L * F)  # (U, L·F)
    mean, by_mean = top_earliest(means, SEARCH_TOP)
    top_max, by_max = top_earliest(maxes.permute(1, 0, 2).reshape(U, L * F), SEARCH_TOP)
    return NeuronIndex(
        ids=ids, owned=owned, acts=best.half().numpy(), pos=best_pos.numpy().astype(np.int32),
        hist=_compact(hist.view(L, F, BINS).numpy()),
        hist_range=torch.stack([lo, hi], -1).numpy().astype(np.float32), positive=_compact(positive.numpy()),
        vocab=vocab.astype(np.int32), vocab_count=count.numpy().astype(np.int32),
        by_mean=_compact(by_mean.numpy()), mean=mean.half().numpy(), by_max=_compact(by_max.numpy()),
        max=top_max.half().numpy())


def _compact(a: np.ndarray) -> np.ndarray:
    """Non-negative integers in the smallest unsigned type that holds them (uint16 when they fit)."""
    return a.astype(np.uint16 if a.size == 0 or int(a.max()) < 2 ** 16 else np.uint32)


def to_model_ids_of(model: Transformer, real: list[int]) -> list[int]:
    """Tokenizer ids -> the model's ids (a compacted vocabulary maps them; byte fallback leaves none unknown)."""
    if not model.cfg.vocab_map:
        return list(real)
    index, unk = vocab_index(model.cfg.vocab_map), unknown_id(model)
    return [index.get(r, unk if unk is not None else 0) for r in real]


def save_index(index: NeuronIndex, folder: Path) -> Path:
    """Write neurons.npz (compressed; the same index gives the same bytes: no time stamps in it)."""
    path = Path(folder) / INDEX_FILE
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for name, arr in {"version": np.asarray(INDEX_VERSION), **index.arrays()}.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with z.open(info, "w") as f:
                np.lib.format.write_array(f, np.asarray(arr), allow_pickle=False)
    path.write_bytes(buf.getvalue())
    return path


def load_index(folder: Path) -> NeuronIndex | None:
    """The index shipped beside a model's weights, or None when it has none (or one of an older format)."""
    path = Path(folder) / INDEX_FILE
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as z:
        if "version" not in z.files or int(z["version"].ravel()[0]) != INDEX_VERSION:
            return None
        return NeuronIndex(**{name: z[name] for name in NeuronIndex.__dataclass_fields__})


# ---- the examples: a window of held-out text around each top activation, every token's activation ----------------

@dataclass(frozen=True)
class Snippet:
    activation: float  # the neuron's activation on the firing token (a fresh forward of its chunk)
    tokens: list[str]  # the window's tokens as the pages show them
    fire: int  # index of the firing token in `tokens`
    before: str  # the window's text before and after the firing token, whole characters (text_around)
    after: str
    acts: np.ndarray  # (W,) float32 the neuron's activation on every token of the window
    pieces: list[tuple[str, list[int]]]  # the window's text in whole characters: (text, indices of its tokens)
    chunk: int  # where the window is in the index: its chunk, its first position there
    start: int


def _continues(raw: bytes) -> bool:
    """A token that starts inside a character (its first byte is a UTF-8 continuation byte)."""
    return bool(raw) and raw[0] & 0xC0 == 0x80


def _wordish(ch: str) -> bool:
    """A letter or digit of a script that writes words apart (not a CJK character, each a word break of its own)."""
    return ch.isalnum() and unicodedata.east_asian_width(ch) not in ("W", "F")


def _joins(left: bytes, right: bytes) -> bool:
    """Two adjacent tokens inside one word (no space or punctuation between them)."""
    a, b = left.decode("utf-8", "ignore"), right.decode("utf-8", "ignore")
    return bool(a) and bool(b) and _wordish(a[-1]) and _wordish(b[0])


def _cut_short(data: bytes) -> bool:
    """Bytes that end inside a character."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.reason == "unexpected end of data"
    return False


def window(raws: list[bytes], pos: int) -> tuple[int, int]:
    """[lo, hi) of the tokens shown around position `pos` of a chunk (its tokens' bytes `raws`): BEFORE tokens before
    and AFTER after (shifted to keep BEFORE + 1 + AFTER at a chunk's edge), grown by up to EXTEND tokens at either
    edge to a whole word and always to whole characters; bytes of a character cut off by the chunk's own edge are
    left out."""
    T, size = len(raws), BEFORE + 1 + AFTER
    lo = max(0, pos - BEFORE)
    hi = min(T, lo + size)
    lo = max(0, hi - size)
    for _ in range(EXTEND):
        if lo > 0 and (_continues(raws[lo]) or _joins(raws[lo - 1], raws[lo])):
            lo -= 1
        if hi < T and (_continues(raws[hi]) or _joins(raws[hi - 1], raws[hi])):
            hi += 1
    while lo < pos and _continues(raws[lo]):  # a character begun before the chunk
        lo += 1
    while hi - 1 > pos and _cut_short(b"".join(raws[lo:hi])):  # one the chunk's end cuts
        hi -= 1
    return lo, hi


def _raws(model: Transformer, enc, ids) -> list[bytes]:
    return [token_bytes(enc, i) or UNK_LABEL.encode() for i in real_ids(model, ids)]


@torch.inference_mode()
def top_snippets(model: Transformer, index: NeuronIndex, layer: int, neuron: int) -> list[Snippet]:
    """The held-out places where this neuron fires most (its indexed top activations above 0), largest first, each
    with the neuron's activation on every token of its window: one forward of the chunks they are in, up to the
    layer and the last window's end."""
    layer, neuron = check_neuron(model, layer, neuron)
    keep = [(int(c), int(p)) for a, (c, p) in zip(index.acts[layer, neuron], index.where[layer, neuron], strict=True)
            if np.isfinite(a) and a > 0]
    if not keep:
        return []
    enc = load_encoding(model.cfg.encoding)
    chunks = sorted({c for c, _ in keep})
    raws = {c: _raws(model, enc, index.ids[c]) for c in chunks}
    windows = [window(raws[c], p) for c, p in keep]
    needed = max(hi for _, hi in windows)  # causal: the tokens after the last window change nothing before it
    name = act_name("ffn_hidden", layer=layer)
    _, trace = run_with_trace(model, torch.as_tensor(index.ids[chunks, :needed], dtype=torch.long), names=[name],
                              stop_early=True)
    h = trace[name][..., neuron].float().numpy()  # (B, needed)
    row, out = {c: i for i, c in enumerate(chunks)}, []
    for (c, p), (lo, hi) in zip(keep, windows, strict=True):
        ids, acts = index.ids[c, lo:hi].tolist(), h[row[c], lo:hi].copy()
        before, after = text_around(raws[c][lo:hi], p - lo)
        out.append(Snippet(float(acts[p - lo]), sequence_labels(model, ids), p - lo, before, after, acts,
                           _group_tokens(raws[c][lo:hi])[1], c, lo))
    return sorted(out, key=lambda s: -s.activation)  # (stable: the index's order where equal)


@dataclass(frozen=True)
class Histogram:
    """A neuron's activation over every counted held-out token."""

    edges: np.ndarray  # (BINS + 1,) float32
    counts: np.ndarray  # (BINS,) int64
    n_tokens: int
    positive: int  # tokens where the activation is above 0

    @property
    def positive_share(self) -> float:
        return self.positive / max(1, self.n_tokens)


def histogram(index: NeuronIndex, layer: int, neuron: int) -> Histogram:
    lo, hi = (float(x) for x in index.hist_range[layer, neuron])
    edges = np.linspace(lo, hi if hi > lo else lo + 1.0, BINS + 1, dtype=np.float32)
    return Histogram(edges, index.hist[layer, neuron].astype(np.int64), index.n_tokens,
                     int(index.positive[layer, neuron]))


# ---- which neurons fire on a token --------------------------------------------------------------------------------

@dataclass(frozen=True)
class TokenChoice:
    token: int  # model id
    label: str  # as the pages show it
    count: int  # occurrences in the counted held-out text


@dataclass(frozen=True)
class TokenSearch:
    """What a typed token or word is for this model: its tokens (and the same text after a space when that is one
    token, as a word reads inside running text), the ones the held-out text holds, most frequent first."""

    text: str
    pieces: list[str]  # the typed text's tokens as the pages show them
    choices: list[TokenChoice]


def token_search(model: Transformer, index: NeuronIndex, text: str) -> TokenSearch:
    """The held-out tokens a typed token or word can be searched by (see TokenSearch). Raises InputError
    `neuron_search_empty`, `_long`, `_special` (a special token such as <|endoftext|>), `_unknown` (a token outside
    the model's vocabulary) or `_absent` (none of its tokens occurs in the held-out text)."""
    text = (text if isinstance(text, str) else "").rstrip()
    if not text.strip():
        raise InputError("neuron_search_empty")
    if len(text) > SEARCH_MAX_CHARS:
        raise InputError("neuron_search_long", n=f"{len(text):,}", max=SEARCH_MAX_CHARS)
    enc = load_encoding(model.cfg.encoding)
    special = next((s for s in sorted(enc.special_tokens_set) if s in text), None)
    if special is not None:
        raise InputError("neuron_search_special", token=special)
    variants = [text] + ([" " + text] if not text[0].isspace() else [])
    found: dict[int, None] = {}
    typed: list[int] = []
    unknown = False
    for n, variant in enumerate(variants):
        real = encode_by_line(enc, variant)
        if n > 0 and len(real) > 1:  # after a space: only where that makes it one token (a word in running text)
            continue
        if any(not _in_vocab(model, r) for r in real):
            unknown = True
            continue
        ids = to_model_ids_of(model, real)
        typed = typed or ids
        found.update(dict.fromkeys(ids))
    at = np.searchsorted(index.vocab, list(found))
    counts = [int(index.vocab_count[a]) if a < len(index.vocab) and index.vocab[a] == i else 0
              for i, a in zip(found, at, strict=True)]
    if not found and unknown:
        raise InputError("neuron_search_unknown", text=text, n=f"{model.cfg.vocab_size:,}")
    labels = token_labels(model, list(found), context=typed)  # a piece of a typed character as "明 1/2"
    choices = sorted((TokenChoice(i, lab, n) for i, lab, n in zip(found, labels, counts, strict=True) if n),
                     key=lambda c: -c.count)
    if not choices:
        raise InputError("neuron_search_absent", text=text)
    return TokenSearch(text, sequence_labels(model, typed), choices)


def _in_vocab(model: Transformer, real: int) -> bool:
    vmap = model.cfg.vocab_map
    return real in vocab_index(vmap) if vmap else real < model.cfg.vocab_size


def neurons_for_token(model: Transformer, index: NeuronIndex, token: int, by: str = "mean",
                      k: int = 10) -> list[tuple[int, int, float]]:
    """(layer, neuron, mean or max activation) of the k neurons (at most SEARCH_TOP) that fire most on this token
    over the held-out text, largest first."""
    at = int(np.searchsorted(index.vocab, token))
    if at >= len(index.vocab) or int(index.vocab[at]) != int(token):
        raise InputError("neuron_search_absent", text=sequence_labels(model, [int(token)])[0])
    neurons, values = (index.by_mean, index.mean) if by == "mean" else (index.by_max, index.max)
    F = model.cfg.d_ffn
    return [(int(n) // F, int(n) % F, float(v)) for n, v in zip(neurons[at][:k], values[at][:k], strict=True)]


# ---- what the neuron writes, and everything read at once ----------------------------------------------------------

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
    examples that excite it most and its activation histogram (when the model ships a neuron index), and the tokens
    its output pushes up and down (decoder-only models)."""

    layer: int
    neuron: int
    on_text: np.ndarray | None  # (T,)
    snippets: list[Snippet]
    up: list[tuple[int, float]]  # (model id, logit change per unit activation), largest first
    down: list[tuple[int, float]]
    histogram: Histogram | None = None

    def arrays(self) -> dict[str, np.ndarray]:
        width = max((len(s.acts) for s in self.snippets), default=0)
        window_acts = np.full((len(self.snippets), width), np.nan, dtype=np.float32)  # (n, W) NaN past a window
        for row, s in zip(window_acts, self.snippets, strict=True):
            row[:len(s.acts)] = s.acts
        out = {"layer_neuron": np.array([self.layer, self.neuron]),
               "snippet_activation": np.array([s.activation for s in self.snippets], dtype=np.float32),
               "snippet_before": np.array([s.before for s in self.snippets], dtype=str),
               "snippet_token": np.array([s.tokens[s.fire] for s in self.snippets], dtype=str),
               "snippet_after": np.array([s.after for s in self.snippets], dtype=str),
               "snippet_window_acts": window_acts,
               "snippet_fire": np.array([s.fire for s in self.snippets], dtype=np.int64),
               "up_ids": np.array([i for i, _ in self.up], dtype=np.int64),
               "up_logit": np.array([v for _, v in self.up], dtype=np.float32),
               "down_ids": np.array([i for i, _ in self.down], dtype=np.int64),
               "down_logit": np.array([v for _, v in self.down], dtype=np.float32)}
        if self.histogram is not None:
            out["histogram_edges"], out["histogram_counts"] = self.histogram.edges, self.histogram.counts
        if self.on_text is not None:
            out["on_text"] = self.on_text
        return out


def read_neuron(model: Transformer, trace, layer: int, neuron: int, index: NeuronIndex | None = None,
                k: int = 10, snippets: list[Snippet] | None = None) -> NeuronReading:
    """One decoder neuron read four ways (see NeuronReading); `index`: load_index of the model's folder, or None;
    `snippets`: top_snippets of it already computed (the page caches them per neuron)."""
    layer, neuron = check_neuron(model, layer, neuron)
    up, down = ([], []) if model.is_encoder_decoder else output_tokens(model, layer, neuron, k)
    if snippets is None:
        snippets = top_snippets(model, index, layer, neuron) if index is not None else []
    return NeuronReading(layer, neuron, neuron_on_text(trace, layer, neuron), snippets, up, down,
                         histogram(index, layer, neuron) if index is not None else None)


def shipped_index(name: str) -> NeuronIndex | None:
    """The neuron index shipped beside a model of assets/models (None when it has none)."""
    from ..sources import Places

    return load_index(Places().shipped_dir / name)


def index_folder(model, folder: Path) -> Path:
    """Index a model's FFN neurons over the held-out samples shipped in its folder, in file-name order (the build
    and `python -m transformer_core.train.neuron_index` write the same file); returns the index's path."""
    texts = [p.read_text(encoding="utf-8") for p in sorted(folder.glob("heldout_*.txt"))]
    return save_index(build_index(model, texts), folder)
