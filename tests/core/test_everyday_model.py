"""The default model reads any text: a byte-fallback vocabulary (a merge-closed subset of cl100k_base), no ⟨unk⟩
in any shipped language model, its card's everyday figures recomputed from the shipped weights, and no card names a
folder of the machine it was built on."""
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformer_core.text.compare import compare_counts
from transformer_core.text.inputs import UNK, model_text, prepare
from transformer_core.text.subset import is_merge_closed, merge_parts, splits_a_character, subset_meta
from transformer_core.text.tokenizer import BUNDLED, decode, load_encoding, tokenize
from transformer_core.train.build import DEFAULT_MODEL
from transformer_core.train.checkpoint import load_checkpoint
from transformer_core.train.corpora import brown_words, parse_peoples_daily
from transformer_core.train.defaults import SHIPPED_LMS, described
from transformer_core.train.everyday import GROUPS, SLOT_FRAMES, read_groups, slot_copy, slot_words
from transformer_core.train.kneser_ney import KneserNeyTrigram

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "models"
SUBSET, SIZE = (SHIPPED_LMS[DEFAULT_MODEL]["subset"][k] for k in ("name", "size"))  # the default's vocabulary

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


@pytest.fixture(scope="module")
def default():
    return load_checkpoint(ASSETS / DEFAULT_MODEL)


def test_the_shipped_vocabulary_has_every_byte_and_is_merge_closed():
    sub, base = load_encoding(SUBSET), load_encoding("cl100k_base")
    ranks, meta = sub._mergeable_ranks, json.loads((BUNDLED / f"{SUBSET}.json").read_text())
    assert len(ranks) == meta["size"] == SIZE
    first_new = max(base.max_token_value, *base._special_tokens.values()) + 1
    old = {t: r for t, r in ranks.items() if r < first_new}
    assert all(base._mergeable_ranks[t] == r for t, r in old.items())  # cl100k_base's own ids where it has the token
    new = [t for t, r in ranks.items() if r >= first_new]
    assert len(new) == meta.get("new_tokens", 0)
    # a new token is a Chinese character cl100k_base spells in pieces, or the first two bytes of one
    assert all(t.decode("utf-8", "ignore") == "" or len(t.decode("utf-8")) == 1 for t in new)
    assert all(t not in base._mergeable_ranks or len(t) == 2 for t in new)
    assert is_merge_closed(ranks, ranks)  # every token is what BPE with these ranks builds from its bytes
    assert not any(splits_a_character(t) for t in ranks)  # no token holds a piece of a character beside another


def test_words_and_characters_are_whole_and_every_byte_still_reads():
    from transformer_core.train.everyday import SHARE_TARGETS, vocabulary_shares

    shares = vocabulary_shares(SUBSET)
    assert all(shares[k] >= target for k, target in SHARE_TARGETS.items()), shares
    enc = load_encoding(SUBSET)
    for text in ("今天天气很好，我们去公园散步吧。", "他昨天买了一本书", " Mary and John", " airport ticket"):
        assert all(t.decode("utf-8", "strict") for t in map(enc.decode_single_token_bytes, enc.encode(text)))
    assert enc.decode(enc.encode("龘 🙂 \x00 ẞ")) == "龘 🙂 \x00 ẞ"  # rarer characters: byte pieces, never ⟨unk⟩


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF), min_size=1, max_size=12))
def test_a_kept_chinese_character_is_never_cut_whatever_its_neighbours(text):
    enc = load_encoding(SUBSET)
    kept = {t.decode("utf-8") for t in enc._mergeable_ranks if len(t) == 3 and t.decode("utf-8", "ignore")}
    at, cuts = 0, set()
    for tok in enc.encode(text):
        at += len(enc.decode_single_token_bytes(tok))
        cuts.add(at)
    offsets = [len(text[:i].encode("utf-8")) for i in range(len(text) + 1)]
    for i, ch in enumerate(text):
        if ch in kept:  # no token boundary inside it
            assert not any(offsets[i] < c < offsets[i + 1] for c in cuts), (text, ch)


def test_a_character_whole_vocabulary_drops_the_merges_that_cut_characters():
    from transformer_core.text.subset import add_characters, character_whole

    base = {t: r for t, r in load_encoding("cl100k_base")._mergeable_ranks.items() if r < 12_000}  # BPE's first
    whole = character_whole(base)  # merges are merge-closed: a small base, the same rule
    assert all(not splits_a_character(t) for t in whole) and is_merge_closed(whole, whole)
    assert splits_a_character("的".encode() + "是".encode()[:1]) and not splits_a_character("的".encode()[:2])
    chars = add_characters({bytes([b]): base[bytes([b])] for b in range(256)}, ["龘", "的"], whole, 200_000)
    dragon = "龘".encode()  # not a cl100k_base token: a new one, after its first two bytes
    assert chars[dragon] > chars[dragon[:2]] >= 200_000 > base["的".encode()] == chars["的".encode()]
    assert is_merge_closed(chars, chars)


def test_merge_parts_lists_the_tokens_bpe_builds_on_the_way():
    ranks = load_encoding("cl100k_base")._mergeable_ranks
    parts = merge_parts(b" hello", ranks)
    assert parts[-1] == b" hello" and all(p in ranks for p in parts) and len(parts) >= 2


@pytest.mark.parametrize("name", list(SHIPPED_LMS))
def test_no_shipped_language_model_has_an_unknown_token(name):
    cfg = json.loads((ASSETS / name / "config.json").read_text())
    assert UNK not in cfg["vocab_map"] and subset_meta(BUNDLED, cfg["encoding"]) is not None  # byte fallback
    assert set(load_encoding(cfg["encoding"])._mergeable_ranks.values()) <= set(cfg["vocab_map"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(min_size=1, max_size=60))
def test_any_unicode_text_reads_without_an_unknown_token_and_decodes_back(default, text):
    model, _ = default
    if not text.strip():
        return  # empty input has its own message
    prep = prepare(model, text)
    assert prep.src_unknown == []
    if not prep.src.truncated:
        assert decode(prep.src.ids, SUBSET) == prep.src.text


def test_special_token_text_emoji_and_broken_unicode_read_without_unknown_tokens(default):
    model, _ = default
    for text in ("<|endoftext|> hi", "🙂🎉 ok", "bad \udcff byte", "<b>html</b>", "日本語の文と中文"):
        for allow in (False, True):
            assert prepare(model, text, allow_special=allow).src_unknown == []


def test_the_card_everyday_figures_are_what_the_shipped_weights_give(default):
    model, card = default
    got = read_groups(model)
    assert set(got) == set(GROUPS) == set(card["everyday"]["groups"])
    for group, figures in card["everyday"]["groups"].items():
        assert got[group]["unknown"] == 0
        assert got[group]["bits_per_byte"] == pytest.approx(figures["bits_per_byte"], abs=2e-3), group
        assert got[group]["top1"] == pytest.approx(figures["top1"], abs=1e-3), group
    slots = slot_copy(model)
    for frame, figures in card["everyday"]["slots"].items():
        assert slots[frame]["top1"] == pytest.approx(figures["top1"], abs=0.01), frame
        assert slots[frame]["median_p"] == pytest.approx(figures["median_p"], abs=2e-3), frame


def test_a_word_put_in_a_short_sentence_written_twice_is_copied_as_the_bench_says(default):
    """bench/everyday.py's frames, recomputed one text at a time through the Logits page's own path (the words are
    lower-case English words of the vocabulary, one token each)."""
    import torch

    from transformer_core import run

    model, _ = default
    got, ids = slot_copy(model, n=8, seed=3), slot_words(model, 8, 3)
    words = [model_text(model, [i]) for i in ids]
    assert all(w[:1] == " " and w[1:].isalpha() and w[1:].islower() for w in words), words
    for name, (frame, again) in SLOT_FRAMES.items():
        probs, hits = [], 0
        for i, w in zip(ids, words, strict=True):
            src = prepare(model, f"{frame.format(w[1:])} {again}").src_ids
            assert prepare(model, frame.format(w[1:])).src_ids[0].tolist().count(i) == 1  # the word is one token
            p = torch.softmax(run(model, src)[0, -1], -1)
            probs.append(float(p[i]))
            hits += int(p.argmax()) == i
        assert got[name]["top1"] == pytest.approx(hits / len(ids), abs=1e-4), name
        assert got[name]["median_p"] == pytest.approx(float(torch.tensor(probs).median()), abs=1e-4), name
    assert got["list"]["top1"] > got["sentence"]["top1"]  # a frame that favours other words holds the copy back


@pytest.mark.parametrize("name", sorted(SHIPPED_LMS))
def test_a_shipped_card_says_what_its_recipe_says_now(name):
    """Description and summary are written by hand in the recipe: an edit there must reach the shipped card."""
    card = json.loads((ASSETS / name / "card.json").read_text(encoding="utf-8"))
    tc = card["train_config"]
    assert card["description"] == described(name, tc["d_model"], tc["n_layers"])
    assert card.get("summary") == SHIPPED_LMS[name].get("summary")


@pytest.mark.parametrize("name", [n for n, r in SHIPPED_LMS.items() if "summary" in r])
def test_the_one_line_summary_quotes_the_card_s_own_figures(name):
    """The summary is written by hand (what the model is good and bad at): after a rebuild its numbers must follow."""
    card = json.loads((ASSETS / name / "card.json").read_text(encoding="utf-8"))
    groups, trigram = card["everyday"]["groups"], card["everyday"]["trigram_bits_per_byte"]
    best = {k: max(h[k] for h in card["heads"]) for k in ("previous_token", "induction")}
    figures = [f"{groups['chinese']['bits_per_byte']:.2f}", f"{groups['english']['bits_per_byte']:.2f}",
               f"{trigram['english']:.2f}", f"{groups['english']['top1']:.0%}", f"{groups['chinese']['top1']:.0%}",
               f"{best['previous_token']:.2f}", f"{best['induction']:.2f}", card["everyday"]["continuation"]["text"]
               .strip().split()[0].strip(".")]
    if "copy" in card["everyday"]:  # the copy rate and how whole its tokens are, where the card measured them
        copy, shares = card["everyday"]["copy"], card["everyday"]["vocabulary"]
        figures += [f"{copy['english sentences']['top1']:.0%}", f"{copy['english sentences']['median_p']:.2f}",
                    f"{copy['chinese sentences']['top1']:.0%}", f"{shares['english_words_one_token']:.0%}",
                    f"{shares['chinese_characters_whole']:.1%}", copy["cat"]["answer"]]
        assert copy["cat"]["rank"] == 1  # the summary says the cat sentence's first guess is its answer
    if "slots" in card["everyday"]:  # a word in a short sentence written twice, and in a list
        figures += [f"{card['everyday']['slots'][k]['top1']:.0%}" for k in ("sentence", "list")]
    for lang, line in card["summary"].items():
        for figure in figures:
            assert figure in line, (lang, figure)


def test_no_card_names_a_folder_of_the_machine_it_was_built_on():
    folder = re.compile(r"(/root|/home/|/tmp/|/Users/|[A-Z]:\\\\|~/|\.cache)")
    for card in ASSETS.glob("*/card.json"):
        text = card.read_text(encoding="utf-8")
        assert not folder.search(text), (card.parent.name, folder.search(text).group(0))
        assert "cache_dir" not in json.loads(text).get("train_config", {}), card.parent.name


def test_the_tokenizer_comparison_says_how_many_base_tokens_the_subset_spells_in_pieces():
    text = "Supercalifragilistic 今天天气很好 🙂"
    why = compare_counts(text, SUBSET)
    assert why["subset"] and why["base"] == "cl100k_base" and why["size"] == SIZE
    assert why["counts"][SUBSET] >= why["counts"]["cl100k_base"]
    kept = set(load_encoding(SUBSET)._mergeable_ranks.values())
    assert why["not_kept"] == sum(i not in kept for i in tokenize(text, "cl100k_base").ids)


def test_brown_tags_are_dropped_and_spacing_rebuilt():
    tokens = ["``/``", "Only/rb", "a/at", "handful/nn", "''/''", ",/,", "the/at", "jury/nn", "said/vbd", "./.",
              "It/pps", "didn't/dod*", "(/(", "see/vb", ")/)"]
    assert brown_words(tokens) == '"Only a handful", the jury said. It didn\'t (see)'


def test_wordnet_examples_are_the_glosses_quoted_sentences_and_leave_out_adult_senses():
    from transformer_core.train.corpora import ADULT, BLOCKED, wordnet_examples

    data = ("  1 This software and database is being provided to you, the LICENSEE, by\n"
            "02121620 05 n 02 cat 0 true_cat 0 006 @ 02120997 n 0000 | feline mammal usually having thick soft fur; "
            '"the cat sat on the windowsill"; "cats  purr"\n'
            '00001740 03 n 01 entity 0 003 | that which is perceived to have its own distinct existence\n')
    assert wordnet_examples(data) == ["the cat sat on the windowsill", "cats purr"]  # whitespace collapsed
    for kept in ("the team is a unit", "he took the noon flight to Chicago", "hello, said the shell collector"):
        assert not ADULT.search(kept) and not BLOCKED.search(kept)
    for dropped in ("feeling sexy", "a flaccid penis", "damning with faint praise"):
        assert ADULT.search(dropped)


def test_wordnet_examples_are_written_as_prose_a_few_sentences_to_a_line():
    from transformer_core.train.corpora import as_paragraphs

    examples = ["the cat sat on the windowsill", "a deep plot", "How could you do such a thing?",
                "`It's funny,' he said musingly", "he left before the end of the film", "she was late again today"]
    assert as_paragraphs(examples, per_line=2) == [  # phrases and quoted fragments left out
        "The cat sat on the windowsill. How could you do such a thing?",
        "He left before the end of the film. She was late again today."]


def test_lines_split_by_a_hash_of_their_text_go_to_one_side_each_in_order():
    from transformer_core.train.corpora import is_heldout, split_lines

    lines = [f"line {i}" for i in range(400)]
    train, heldout, n_held = split_lines(lines, 0.1)
    assert heldout.splitlines() == [line for line in lines if is_heldout(line, 0.1)] and n_held == len(
        heldout.splitlines())
    assert train.splitlines() == [line for line in lines if not is_heldout(line, 0.1)] and 10 < n_held < 80


def test_peoples_daily_words_are_joined_and_digits_made_half_width():
    assert parse_peoples_daily("１９９８年/t  [中国/ns  人民/n]nt  ，/w  好/a") == ["1998年中国人民，好"]


def test_kneser_ney_trigram_is_a_distribution_for_every_context():
    import random

    rng = random.Random(0)
    kn = KneserNeyTrigram([[rng.randrange(20) for _ in range(2000)]], vocab_size=25)
    for u, v in ((1, 2), (None, 3), (24, 23)):
        assert sum(kn.prob(u, v, w) for w in range(25)) == pytest.approx(1.0)


def test_sequence_labels_show_a_character_and_its_piece_not_bytes(default):
    from transformer_core.text.inputs import sequence_labels, token_labels

    model, _ = default
    ids = prepare(model, "他踩了一脚，龘！").src_ids[0].tolist()
    plain, shown = token_labels(model, ids), sequence_labels(model, ids)
    assert any(x.startswith("‹") for x in plain)  # the rare characters are byte pieces in this vocabulary ‹E9 BE›
    assert not any(x.startswith(("<0x", "‹")) for x in shown)
    pieces = [x for x in shown if x.startswith("龘\u00a0")]  # a no-break space: never drawn as a token's ␣
    assert pieces == [f"龘\u00a0{k}/{len(pieces)}" for k in range(1, len(pieces) + 1)] and len(pieces) >= 2
    assert [x for x, p in zip(shown, plain) if not p.startswith("‹")] == [p for p in plain if not p.startswith("‹")]
    # taken one by one (a prediction), a piece is named by the text when the text holds it as one character's piece
    # (a byte that starts two characters of the text, 踩 and 脚 both E8 …, stays in hex: it is not one piece)
    named = token_labels(model, ids, context=ids)
    assert all(n == s or (n == p and p.startswith("‹")) for n, s, p in zip(named, shown, plain))
    assert [n for n in named if n.startswith("龘\u00a0")] == pieces  # unique pieces are named by their character
    assert token_labels(model, ids, context=[]) == plain
