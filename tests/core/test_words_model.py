"""The default's training: rows of text written twice (copying taught on text, not only on random tokens), a warm
start over a new vocabulary, and the name-mover task's sentences."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer_core.model.config import preset
from transformer_core.model.transformer import build_model
from transformer_core.text.subset import bpe
from transformer_core.text.tokenizer import load_encoding
from transformer_core.train import corpora
from transformer_core.train.checkpoint import save_checkpoint
from transformer_core.train.corpus_data import CorpusData
from transformer_core.train.data import IGNORE
from transformer_core.train.transfer import warm_start
from transformer_core.train.vocab import full_vocab

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py
ENGLISH = "".join(f"The {w} went to the market on day {k} and bought some bread for the family.\n"
                  for k, w in enumerate(["farmer", "teacher", "doctor", "baker", "child"] * 8))
CHINESE = "".join(f"今天第{k}天，我们一起去公园散步，天气很好。\n" for k in range(40))


@pytest.fixture
def packed(tmp_path):
    for name, text in (("brown", ENGLISH), ("reviews", CHINESE)):
        hashes = corpora.text_hashes(text + "A dog ran.\n", text, "A dog ran.\n")
        corpora.write_packed(corpora.Corpus(name, text, "A dog ran.\n", {"package": "test", **hashes}), tmp_path)
    return tmp_path


def rows_of(data: CorpusData, n: int = 16):
    b = data.batch("train", n)
    return b.src.numpy(), b.labels.numpy()


def test_text_written_twice_repeats_the_corpus_s_own_text_and_skips_the_unknowable_first_token(packed):
    data = CorpusData(("brown", "reviews"), 48, None, cache_dir=packed, encoding="cl100k_words", repeat_fraction=1.0)
    rng = np.random.default_rng(0)
    for k in range(2):
        first, second = data.text_twice(rng, data.streams["train"][k])
        copy = data.text_of(second)
        assert data.text_of(first).startswith(copy.rstrip()) and copy.strip()  # the span, then (maybe) a gap
        row = np.concatenate([first, second])
        assert data.text_of(row).count(copy.strip()) >= 2
    src, labels = rows_of(data)
    for row, lab in zip(src, labels, strict=True):
        hidden = np.flatnonzero(lab == IGNORE)
        assert len(hidden) == 1  # only the second copy's first token: the rest is text to read and to copy
        at = hidden[0] + 1  # where the second copy starts in the row
        span = data.text_of(row[at:])
        assert data.text_of(row[:at]).strip().startswith(span[: len(span) // 3].strip()[:6])


def test_a_list_written_twice_learns_only_the_second_copy(packed):
    data = CorpusData(("brown", "reviews"), 64, None, cache_dir=packed, encoding="cl100k_words", list_fraction=1.0)
    assert data.list_words and all(w.isalpha() and w.islower() for w in data.list_words)
    rng = np.random.default_rng(1)
    for k, chinese in enumerate(data.chinese):
        first, second = data.list_twice(rng, data.streams["train"][k], chinese)
        assert np.array_equal(first, second)
        text = data.text_of(first)
        assert ("、" in text) == chinese and ("," in text) != chinese
    src, labels = rows_of(data)
    for row, lab in zip(src, labels, strict=True):
        skipped = int((lab == IGNORE).sum())
        first = data.text_of(row[:skipped])  # the first copy (its labels skipped) and the second copy's first token
        assert first and data.text_of(row[skipped:]).startswith(first[len(first) // 2:][:3]) or skipped > 0


def test_a_sentence_written_twice_may_have_a_word_its_frame_does_not_expect(packed):
    """slot_share: a span of the corpus with one word swapped for a random word of the vocabulary (in Chinese a
    character for another), the same both times, so that the copy, not the frame, predicts it the second time."""
    data = CorpusData(("brown", "reviews"), 48, None, cache_dir=packed, encoding="cl100k_words", repeat_fraction=1.0,
                      slot_share=1.0)
    assert data.list_words  # the words it swaps in
    rng = np.random.default_rng(2)
    swapped = {0: 0, 1: 0}
    for _ in range(20):
        for k, source in enumerate((ENGLISH, CHINESE)):
            first, second = data.text_twice(rng, data.streams["train"][k])
            assert np.array_equal(first, second)  # no gap: the sentence and at once the same sentence
            text = data.text_of(first).strip()
            if k == 0:
                words = text.split(" ")
                new = [w for w in words[1:] if w.isalpha() and w.islower() and w not in source]
                swapped[0] += len(new) == 1 and new[0] in data.list_words
            else:
                swapped[1] += text not in source  # a character of the corpus, elsewhere
    assert swapped[0] >= 12 and swapped[1] >= 12, swapped  # (a word of the vocabulary may be one the text has)
    plain = CorpusData(("brown",), 48, None, cache_dir=packed, encoding="cl100k_words", repeat_fraction=1.0)
    first, _ = plain.text_twice(np.random.default_rng(2), plain.streams["train"][0])
    assert all(w in ENGLISH for w in plain.text_of(first).split())  # slot_share 0: the corpus's text as it is


def test_row_kinds_share_the_batch_as_configured(packed):
    data = CorpusData(("brown",), 48, None, cache_dir=packed, encoding="cl100k_words", repeat_fraction=0.5,
                      synthetic_fraction=0.0, seed=3)
    _, labels = rows_of(data, 200)
    repeated = (labels == IGNORE).any(1).mean()
    assert 0.35 < repeated < 0.65  # about half the rows hold a text written twice


def tiny(encoding: str, d: int = 16):
    enc = load_encoding(encoding)
    vocab = full_vocab(enc, [(s.strip("<|>"), i) for s, i in sorted(enc._special_tokens.items(), key=lambda x: x[1])])
    cfg = preset("course-gpt", vocab_size=vocab.size, vocab_map=vocab.real_ids, max_len=16, encoding=encoding,
                 d_model=d, n_heads=2, n_layers=1, d_ffn=32, norm_first=True, tie_embeddings=True, dropout=0.0)
    return build_model(cfg, "cpu")


def test_a_warm_start_carries_the_layers_and_builds_a_new_word_from_its_old_pieces(tmp_path):
    old = tiny("cl100k_2k")
    with torch.no_grad():
        for p in old.parameters():
            p.normal_()
    save_checkpoint(old, tmp_path / "old", {"name": "old"})
    new = tiny("cl100k_words")
    report = warm_start(new, str(tmp_path / "old"))
    old_state, new_state = old.state_dict(), new.state_dict()
    vocab_keys = {k for k, v in new_state.items() if v.shape[:1] == (len(new.cfg.vocab_map),)}
    assert vocab_keys and all(torch.equal(new_state[k], old_state[k]) for k in new_state if k not in vocab_keys)
    old_enc, new_enc = load_encoding("cl100k_2k"), load_encoding("cl100k_words")
    old_row = {old_enc.decode_single_token_bytes(r): i for i, r in enumerate(old.cfg.vocab_map)
               if r not in old_enc._special_tokens.values()}
    row = {new_enc.decode_single_token_bytes(r): i for i, r in enumerate(new.cfg.vocab_map)
           if r not in new_enc._special_tokens.values()}
    emb = next(k for k in vocab_keys if new_state[k].dim() == 2)
    same = b" the"
    assert torch.equal(new_state[emb][row[same]], old_state[emb][old_row[same]])
    word = b" airport"
    assert word in row and word not in old_row
    ranks = {t: old.cfg.vocab_map[i] for t, i in old_row.items()}
    pieces = bpe(word, ranks)[0]
    assert len(pieces) >= 2
    want = torch.stack([old_state[emb][old_row[p]] for p in pieces]).mean(0)
    assert torch.allclose(new_state[emb][row[word]], want)
    assert report["embeddings_kept"] + report["embeddings_from_pieces"] == len(new.cfg.vocab_map)


def test_a_warm_start_reads_a_token_that_a_rebuilt_subset_dropped_from_the_subset_s_base(tmp_path, monkeypatch):
    """The model to start from was trained over its subset as it was; a rebuild of the same name may drop a token."""
    from transformer_core.train import transfer

    model = tiny("cl100k_words")
    enc, base = load_encoding("cl100k_words"), load_encoding("cl100k_base")
    dropped, = enc.encode_ordinary(" cat")
    at = model.cfg.vocab_map.index(dropped)

    class Rebuilt:  # the same encoding without " cat"
        _special_tokens = enc._special_tokens

        def decode_single_token_bytes(self, real):
            if real == dropped:
                raise KeyError(str(real))
            return enc.decode_single_token_bytes(real)

    monkeypatch.setattr(transfer, "load_encoding", lambda name: Rebuilt() if name == "cl100k_words" else base)
    assert transfer.token_bytes(model.cfg)[at] == b" cat"  # read from cl100k_base: a subset's ids are its base's ranks


def test_a_warm_start_from_a_model_of_another_width_is_refused_with_a_message(tmp_path):
    from transformer_core.errors import TrainingError

    save_checkpoint(tiny("cl100k_2k", d=32), tmp_path / "wide", {"name": "wide"})
    with pytest.raises(TrainingError) as err:
        warm_start(tiny("cl100k_words"), str(tmp_path / "wide"))
    assert err.value.code == "train_init_shape"
    with pytest.raises(TrainingError) as err:
        warm_start(tiny("cl100k_words"), "git:0000000:assets/models/nothing")
    assert err.value.code == "train_init_missing"


# ------------------------------------------------------------------ the name-mover task
def test_name_sentences_keep_held_out_names_and_templates_apart():
    from transformer_core.train import ioi
    from transformer_core.train.tasks import TASKS

    task = TASKS["ioi"]
    for lang in ("en", "zh"):
        train_names, held_names = set(ioi.names(lang, False)), set(ioi.names(lang, True))
        assert train_names and held_names and not train_names & held_names
        assert not set(ioi.templates(lang, False)) & set(ioi.templates(lang, True))
        stand_ins = set(task.symbols[lang == "zh"])  # training words (Chinese: characters) that stand in for names
        assert not stand_ins & (train_names | held_names)
        assert not stand_ins & {c for n in train_names | held_names for c in n}  # not a name's character either
        for ex in task.held_out(60, 5, lang, held=False):
            assert ex.io != ex.s and all(n in train_names or n in stand_ins or  # Chinese: two stand-in characters
                                         (lang == "zh" and len(n) == 2 and set(n) <= stand_ins) for n in (ex.io, ex.s))
            assert ex.prompt.count(ex.s) == 2 and ex.prompt.count(ex.io) == 1  # the subject comes back
            ids, trained, scored = task.targets(ex)
            k = scored.index(True)
            assert ids[k + 1] == task.first_ids(ex)[0] and sum(scored) == 1
        for ex in task.held_out(60, 5, lang, held=True):
            assert {ex.io, ex.s} <= held_names
    # the two names of a sentence always differ in their first token (the metric reads first tokens)
    firsts = {task.first_ids(ex) for lang in ("en", "zh") for ex in task.held_out(200, 9, lang)}
    assert all(a != b for a, b in firsts)


def test_the_demo_vocabulary_holds_the_default_s_tokens_of_every_sentence_and_every_byte():
    from transformer_core.text.subset import is_merge_closed
    from transformer_core.train.ioi import VOCAB, WORDS, names_vocabulary

    shipped = load_encoding(VOCAB)._mergeable_ranks
    assert shipped == names_vocabulary()  # the shipped file is what the build writes
    assert is_merge_closed(shipped, shipped) and all(bytes([b]) in shipped for b in range(256))
    words, names = load_encoding(WORDS), load_encoding(VOCAB)
    text = "When Tom and Anna arrived at the party, Anna handed the gift to Tom."
    assert names.encode(text) == words.encode(text)
    assert names.decode(names.encode("Any other text, 龘 🙂")) == "Any other text, 龘 🙂"


def test_the_app_reads_a_name_sentence_with_the_ids_the_demo_was_trained_on():
    """Its new Chinese tokens rank after cl100k's special tokens: the app's ids must follow the task's, not a sort."""
    from transformer_core.model.transformer import build_model
    from transformer_core.text.inputs import prepare
    from transformer_core.train.tasks import TASKS

    task = TASKS["ioi"]
    model = build_model(task.model_config(d_model=16, n_heads=2, n_layers=1, d_ffn=32), "cpu")
    for text in ("周末江涛和廖凡淋湿了，所以廖凡把一杯水递给了", "When Tom and Anna arrived, Anna gave it to"):
        assert prepare(model, text).src_ids[0].tolist() == task.to_ids(text)
        assert load_encoding(task.encoding).decode([task.vocab_map[i] for i in task.to_ids(text)]) == text


def test_the_name_movers_card_is_what_its_weights_give():
    """Recomputed from the shipped weights: each language's held-out wins and mean logit difference, and the share
    of the difference the card's top head removes, by a hand-written knock-out on the card's own sweep sentences
    (the targets themselves are bench/everyday.py's PASS / MISS)."""
    from transformer_core.model.hooks import act_name, capture, intervene
    from transformer_core.model.trace import run
    from transformer_core.text.inputs import prepare
    from transformer_core.train.build import NAME_MOVER_SHARE
    from transformer_core.train.checkpoint import load_checkpoint
    from transformer_core.train.ioi import READS_NAMES
    from transformer_core.train.tasks import TASKS

    folder = Path(__file__).resolve().parents[2] / "assets" / "models" / "name-movers"
    if not (folder / "config.json").is_file():
        pytest.skip("the name-movers model is not shipped in this checkout")
    model, card = load_checkpoint(folder)
    task = TASKS["ioi"]
    assert not model.cfg.final_norm  # below, a head's direct write is its output times the output layer
    hs = model.cfg.head_dim
    removes = {}
    for lang in ("en", "zh"):
        row = card["circuit"]["by_language"][lang]
        held = row["held_out"]
        d = task.logit_diffs(model, task.held_out(held["sentences"], 77, lang))
        assert float((d > 0).mean()) == pytest.approx(held["right_name_wins"], abs=1e-3)
        assert float(d.mean()) == pytest.approx(held["mean_logit_diff"], abs=2e-2)
        layer, head = row["heads"]["top"]

        def edit(z, head=head):  # (B, nh, T, hs): the head's output, its mean over the sentence everywhere
            out = z.clone()
            out[:, head] = z[:, head].mean(dim=1, keepdim=True)
            return out

        clean, knocked, writes = [], [], []
        W_o = model.decoder.layers[layer].self_attn.W_o.weight.detach()[:, head * hs:(head + 1) * hs]  # (d, hs)
        for ex in task.held_out(24, 78, lang):  # the card's sweep sentences (circuit_report: seed + 1)
            ids = prepare(model, ex.prompt).src_ids
            io, s = task.first_ids(ex)
            with capture([act_name("z", layer=layer, block="dec_self")]) as got:
                logits = run(model, ids)[0, -1]
            clean.append(float(logits[io] - logits[s]))
            # what the head writes into the stream at the last position, read out by the output layer (no final
            # norm: the logits are the stream times W_out, plus its bias)
            wrote = W_o @ got[act_name("z", layer=layer, block="dec_self")][0, head, -1]  # (d,)
            writes.append([float(model.out.weight[tok].detach() @ wrote) for tok in (io, s)])
            with intervene({act_name("z", layer=layer, block="dec_self"): edit}):
                logits = run(model, ids)[0, -1]
            knocked.append(float(logits[io] - logits[s]))
        removes[lang] = 1 - np.mean(knocked) / np.mean(clean)
        assert removes[lang] == pytest.approx(row["heads"]["top_removes"], abs=2e-3)
        assert np.mean(knocked) - np.mean(clean) == pytest.approx(row["heads"]["top_change"], abs=2e-2)
        for value, key in zip(np.mean(writes, axis=0), ("writes_answer", "writes_repeated"), strict=True):
            assert value == pytest.approx(row["heads"][key][layer][head], abs=2e-3), (lang, key)
        # each head's attention from the last position to the two names, read from hooks of this test's own
        attn = {key: np.zeros((model.cfg.n_layers, model.cfg.n_heads)) for key in ("to_answer", "to_repeated")}
        examples = task.held_out(24, 78, lang)
        for ex in examples:
            ids = prepare(model, ex.prompt).src_ids
            names = [act_name("weights", layer=layer, block="dec_self") for layer in range(model.cfg.n_layers)]
            with capture(names) as got:
                run(model, ids)
            tokens = ids[0].numpy()
            for key, tok in zip(attn, task.first_ids(ex), strict=True):
                attn[key] += np.stack([got[n][0, :, -1, tokens == tok].sum(-1).numpy() for n in names])
        for key, value in attn.items():
            assert np.allclose(value / len(examples), row["heads"][key], atol=2e-3), (lang, key)
        reads = (attn["to_answer"] + attn["to_repeated"]) / len(examples)
        reading = np.where(reads >= READS_NAMES, -np.asarray(row["heads"]["relative_change"]), -np.inf)
        assert (layer, head) == np.unravel_index(np.argmax(reading), reading.shape)  # the top head reads a name
    for row in json.loads((folder / "card.json").read_text())["heads"]:  # the table follows the sweep's shares
        by = card["circuit"]["by_language"]
        change = [by[lang]["heads"]["relative_change"][row["layer"]][row["head"]] for lang in ("en", "zh")]
        to = {name: [by[lang]["heads"][f"to_{name}"][row["layer"]][row["head"]] for lang in ("en", "zh")]
              for name in ("answer", "repeated")}
        reads_one = min(np.add(to["answer"], to["repeated"])) >= READS_NAMES
        strong = min(-c for c in change) >= NAME_MOVER_SHARE and reads_one
        reads = {"name_mover": all(np.greater_equal(to["answer"], to["repeated"])),
                 "repeated_name": all(np.less(to["answer"], to["repeated"]))}
        assert row["kind"] == next((kind for kind, yes in reads.items() if strong and yes), None), row
