"""Reading a neuron (transformer_core.analysis.neurons): the index's top activations, histogram and token search
recomputed by plain forwards with a PyTorch hook on the FFN's down-projection (what it reads is the hidden
activation), on tiny random models built here and on the shipped modern-gpt and kjv-tang-gpt; the shaded examples
against a fresh forward; bad searches give a clear message in English and Chinese."""
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.neurons import absent_word
from transformer_core import build_model, preset
from transformer_core.analysis.neurons import (
    AFTER,
    BEFORE,
    BINS,
    INDEX_FILE,
    SEARCH_TOP,
    TOP,
    build_index,
    chunks_of,
    histogram,
    index_folder,
    load_index,
    neurons_for_token,
    read_neuron,
    save_index,
    token_search,
    top_snippets,
    window,
)
from transformer_core.errors import InputError
from transformer_core.text.inputs import model_text, trace_text
from transformer_core.text.tokenizer import load_encoding
from transformer_core.train.checkpoint import load_checkpoint, read_config
from transformer_core.train.vocab import encode_lines

pytestmark = pytest.mark.usefixtures("one_torch_thread")
MODELS = Path(__file__).resolve().parents[2] / "assets" / "models"
SHIPPED = ("modern-gpt", "kjv-tang-gpt")  # (everyday-gpt is being retrained: its numbers are not pinned here)


def held_out(name: str) -> list[str]:
    return [p.read_text(encoding="utf-8") for p in sorted((MODELS / name).glob("heldout_*.txt"))]


def tiny_texts() -> list[str]:
    """A little of two held-out files (English and Chinese), and one file shorter than a chunk."""
    brown, tang = (MODELS / "modern-gpt" / "heldout_brown.txt"), (MODELS / "modern-gpt" / "heldout_tang.txt")
    return [brown.read_text(encoding="utf-8")[:1500], "Short.", tang.read_text(encoding="utf-8")[:500]]


@pytest.fixture(scope="module", params=["mlp", "gated"])
def tiny(request, tmp_path_factory):
    """(model, index, folder): a random decoder with modern-gpt's vocabulary (context 32), indexed over tiny_texts."""
    vocab = read_config(MODELS / "modern-gpt").vocab_map
    extra = {"ffn": "gated", "activation": "silu"} if request.param == "gated" else {}
    model = build_model(preset("tiny-gpt", encoding="cl100k_8k", vocab_size=len(vocab), vocab_map=vocab, max_len=32,
                               **extra), "cpu")
    folder = tmp_path_factory.mktemp(f"tiny-{request.param}")
    for i, text in enumerate(tiny_texts()):
        (folder / f"heldout_{i}.txt").write_text(text, encoding="utf-8")
    index_folder(model, folder)
    return model, load_index(folder), folder


@pytest.fixture(scope="module")
def shipped():
    return {name: (load_checkpoint(MODELS / name)[0], load_index(MODELS / name)) for name in SHIPPED}


def hidden_by_hook(model, ids: np.ndarray) -> list[np.ndarray]:
    """Per layer (C, T, F): what each FFN's down-projection reads (its hidden activation), by a plain forward hook."""
    seen = {}
    hooks = [layer.ffn.linear2.register_forward_hook(lambda m, i, o, n=n: seen.__setitem__(n, i[0].detach()))
             for n, layer in enumerate(model.decoder.layers)]
    try:
        rows = []
        with torch.no_grad():
            for c in range(len(ids)):  # one chunk at a time (the index ran batches)
                model(torch.tensor(ids[c:c + 1], dtype=torch.long))
                rows.append([seen[n][0].float().numpy() for n in range(len(hooks))])
    finally:
        for h in hooks:
            h.remove()
    return [np.stack([r[n] for r in rows]) for n in range(len(hooks))]


def counted_acts(model, index) -> list[np.ndarray]:
    """Per layer (N, F): the activation at every counted held-out token, in text order."""
    return [h[index.counted] for h in hidden_by_hook(model, index.ids)]


def test_index_counts_every_held_out_token_once_in_chunks_of_the_context(tiny):
    model, index, _ = tiny
    enc = load_encoding(model.cfg.encoding)
    n = sum(len(encode_lines(enc, t)) for t in tiny_texts())
    assert index.n_tokens == n and index.ids.shape[1] == model.cfg.max_len
    assert int(index.vocab_count.sum()) == n
    assert (index.hist.sum(-1) == n).all()  # every neuron's histogram holds every held-out token


def test_chunks_end_each_file_on_its_last_token_and_count_the_overlap_once():
    ids, owned = chunks_of([list(range(10)), list(range(100, 103)), list(range(200, 205))], 4)
    # the 3-token file joins the next one; each file's last chunk ends on its last token
    assert ids.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [6, 7, 8, 9], [100, 101, 102, 200], [201, 202, 203, 204]]
    assert owned.tolist() == [0, 0, 2, 0, 0]
    counted = np.arange(4)[None, :] >= owned[:, None]
    assert ids[counted].tolist() == list(range(10)) + [100, 101, 102] + list(range(200, 205))


def test_top_activations_are_the_true_top_k_over_the_held_out_tokens_in_descending_order(tiny):
    model, index, _ = tiny
    T = index.ids.shape[1]
    flat = np.arange(index.ids.size).reshape(index.ids.shape)[index.counted]  # position of each counted token
    for layer, acts in enumerate(counted_acts(model, index)):  # (N, F)
        truth = -np.sort(-acts, axis=0)[:TOP].T  # (F, TOP) the largest, largest first
        stored = index.acts[layer].astype(np.float32)
        assert (np.diff(stored, axis=1) <= 0).all()  # descending
        np.testing.assert_allclose(stored, truth, rtol=2e-3, atol=2e-3)  # float16
        at = {p: i for i, p in enumerate(flat)}
        again = np.take_along_axis(acts, np.vectorize(at.get)(index.pos[layer]).T, 0).T  # (F, TOP) at the positions
        np.testing.assert_allclose(again, truth, rtol=2e-3, atol=2e-3)
        assert (index.pos[layer] // T < len(index.ids)).all()


def test_histogram_is_the_count_of_the_activations_in_each_bin(tiny):
    model, index, _ = tiny
    for layer, acts in enumerate(counted_acts(model, index)):
        for neuron in (0, 5, model.cfg.d_ffn - 1):
            h = histogram(index, layer, neuron)
            assert h.counts.sum() == index.n_tokens == len(acts) and len(h.edges) == BINS + 1
            np.testing.assert_allclose([h.edges[0], h.edges[-1]], [acts[:, neuron].min(), acts[:, neuron].max()],
                                       rtol=1e-5, atol=1e-6)
            again, _ = np.histogram(acts[:, neuron], bins=h.edges.astype(np.float64))
            assert np.abs(again - h.counts).sum() <= 2  # (a value on an edge may fall either side)
            assert h.positive == int((acts[:, neuron] > 0).sum())


def test_shown_examples_are_shaded_by_a_fresh_forwards_activation_at_every_token(tiny):
    model, index, _ = tiny
    layer, neuron = 1, 3
    snippets = top_snippets(model, index, layer, neuron)
    fresh = hidden_by_hook(model, index.ids)[layer][..., neuron]  # (C, T)
    assert len(snippets) >= 20 and [s.activation for s in snippets] == sorted((s.activation for s in snippets),
                                                                               reverse=True)
    for s in snippets:
        np.testing.assert_allclose(s.acts, fresh[s.chunk, s.start:s.start + len(s.acts)], rtol=1e-4, atol=1e-5)
        assert s.activation == s.acts[s.fire] > 0 and len(s.acts) >= BEFORE + 1 + AFTER - 1
        assert "".join(text for text, _ in s.pieces) == model_text(model, index.ids[s.chunk, s.start:
                                                                                     s.start + len(s.acts)])
        assert sorted(m for _, members in s.pieces for m in members) == list(range(len(s.acts)))
    np.testing.assert_allclose(sorted(s.activation for s in snippets),
                               sorted(index.acts[layer, neuron][index.acts[layer, neuron] > 0].astype(np.float32)),
                               rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_examples_have_context_and_match_a_fresh_forward(shipped, name):
    model, index = shipped[name]
    assert index is not None and index.acts.shape == (model.cfg.n_layers, model.cfg.d_ffn, TOP)
    layer = model.cfg.n_layers - 1
    neuron = int(np.argmax(index.acts[layer, :, -1]))  # one that fires strongly everywhere in its top
    snippets = top_snippets(model, index, layer, neuron)
    assert len(snippets) >= 20 and all(len(s.acts) >= 24 for s in snippets)
    chunks = sorted({s.chunk for s in snippets})
    fresh = hidden_by_hook(model, index.ids[chunks])[layer][..., neuron]
    for s in snippets:
        np.testing.assert_allclose(s.acts, fresh[chunks.index(s.chunk), s.start:s.start + len(s.acts)], rtol=1e-4,
                                   atol=1e-4)
    assert (index.hist.sum(-1) == index.n_tokens).all()
    enc = load_encoding(model.cfg.encoding)
    assert index.n_tokens == sum(len(encode_lines(enc, t)) for t in held_out(name))


@pytest.mark.parametrize("name", (*SHIPPED, "everyday-gpt"))
def test_every_shipped_index_stays_small_and_reads(name):
    path = MODELS / name / INDEX_FILE
    assert path.stat().st_size <= 2 * 2**20
    assert load_index(MODELS / name) is not None


def test_windows_end_on_whole_words_and_whole_characters():
    words = [b" the", b" un", b"believ", b"able", b" story"] * 8  # 40 tokens, a word of three every five
    lo, hi = window(words, 18)  # 16 before would start inside " un|believ|able", 8 after would end inside one
    assert (lo, hi) == (18 - BEFORE - 1, 18 + AFTER + 1 + 2)  # both edges grown to the word's ends
    assert words[lo] == b" un" and words[hi] == b" story"
    han = "明天".encode()  # 6 bytes: 明 split over two tokens at the window's left edge
    raws = [b"a"] * 3 + [han[:2], han[2:3], han[3:]] + [b" x"] * 40
    lo, hi = window(raws, 3 + BEFORE + 1)
    assert raws[lo] == han[:2]  # not starting inside 明
    cut = [han[1:3]] + [b" y"] * 30  # a chunk that starts inside a character: those bytes are left out
    lo, _ = window(cut, 4)
    assert lo == 1


def test_token_search_ranks_neurons_by_mean_and_max_as_a_plain_loop_does(tiny):
    model, index, _ = tiny
    acts = np.concatenate(counted_acts(model, index), axis=1)  # (N, L·F)
    tokens = index.ids[index.counted]
    F = model.cfg.d_ffn
    for token in index.vocab[np.argsort(-index.vocab_count, kind="stable")][:4]:
        rows = [i for i in range(len(tokens)) if tokens[i] == token]
        mean = [sum(acts[i, n] for i in rows) / len(rows) for n in range(acts.shape[1])]
        top = [max(acts[i, n] for i in rows) for n in range(acts.shape[1])]
        for by, values in (("mean", mean), ("max", top)):
            found = neurons_for_token(model, index, int(token), by, k=SEARCH_TOP)
            expect = sorted(values, reverse=True)[:SEARCH_TOP]
            np.testing.assert_allclose([v for _, _, v in found], expect, rtol=2e-3, atol=2e-3)
            for layer, neuron, v in found:  # each named neuron's own value
                assert values[layer * F + neuron] == pytest.approx(v, rel=2e-3, abs=2e-3)


def test_token_search_offers_the_word_after_a_space_and_its_pieces(shipped):
    model, index = shipped["modern-gpt"]
    found = token_search(model, index, "the")
    assert found.choices[0].label == " the" and found.choices[0].count >= found.choices[-1].count
    assert {c.label for c in found.choices} >= {" the"}
    long_word = token_search(model, index, " unbelievable")  # several tokens: each piece the text holds
    assert len(long_word.pieces) > 1 and all(c.count > 0 for c in long_word.choices)
    chinese = token_search(model, index, "天")
    assert any(c.label == "天" for c in chinese.choices)


BAD = [("", "neuron_search_empty"), ("   ", "neuron_search_empty"), ("x" * 500, "neuron_search_long"),
       ("<|endoftext|>", "neuron_search_special"), ("the<|endoftext|>", "neuron_search_special"),
       (None, "neuron_search_absent")]


@pytest.mark.parametrize(("text", "code"), BAD)
def test_bad_searches_say_why_in_english_and_chinese(shipped, text, code):
    model, index = shipped["modern-gpt"]
    text = absent_word(model, index) if text is None else text
    with pytest.raises(InputError) as caught:
        token_search(model, index, text)
    assert caught.value.code == code
    en, zh = caught.value.text("en"), caught.value.text("zh")
    assert en and zh and en != zh and "{" not in en + zh


def test_a_token_outside_a_compact_vocabulary_is_refused_with_a_message():
    enc = load_encoding("cl100k_8k")
    known = sorted({*encode_lines(enc, "the king sat on the mat. " * 3)})
    model = build_model(preset("tiny-gpt", encoding="cl100k_8k", vocab_size=len(known) + 1,
                               vocab_map=(*known, -1), max_len=8), "cpu")
    index = build_index(model, ["the king sat on the mat. " * 6])
    assert [c.label for c in token_search(model, index, "king").choices] == [" king"]  # "king" alone is not in it
    with pytest.raises(InputError) as caught:
        token_search(model, index, "dog")
    assert caught.value.code == "neuron_search_unknown" and "dog" in caught.value.text("zh")


def test_the_index_file_is_the_same_bytes_when_built_again(tiny, tmp_path):
    model, index, folder = tiny
    assert save_index(build_index(model, tiny_texts()), tmp_path).read_bytes() == (folder / INDEX_FILE).read_bytes()


def test_an_index_of_the_older_format_reads_as_none(tmp_path):
    np.savez_compressed(tmp_path / INDEX_FILE, ids=np.zeros((1, 4), np.int32), acts=np.zeros((1, 2, 8), np.float16),
                        where=np.zeros((1, 2, 8, 2), np.int32))
    assert load_index(tmp_path) is None


def test_read_neuron_gathers_examples_histogram_and_what_it_writes(tiny):
    model, index, _ = tiny
    trace = trace_text(model, "The cat sat on the mat.")[1]
    reading = read_neuron(model, trace, 1, 3, index)
    arrays = reading.arrays()
    assert reading.histogram is not None and arrays["histogram_counts"].sum() == index.n_tokens
    assert arrays["snippet_window_acts"].shape[0] == len(reading.snippets) >= 20
    first = reading.snippets[0]
    assert arrays["snippet_window_acts"][0, first.fire] == first.activation
    direct = model.out.weight.detach() @ model.decoder.layers[1].ffn.linear2.weight[:, 3].detach()  # W_U · w_out
    assert [i for i, _ in reading.up] == direct.topk(10).indices.tolist()
    assert [i for i, _ in reading.down] == (-direct).topk(10).indices.tolist()
