"""Tokenizer: the course's cl100k numbers, partial-byte tokens, special tokens, broken text, bounded work."""
import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry
import torch

import transformer_core.text.tokenizer as tokmod
from transformer_core.model.masks import padding_mask
from transformer_core.text.inputs import padded_batch
from transformer_core.text.tokenizer import EncodingUnavailable, load_encoding, tokenize

SENT_1 = "同志们!我踩着地雷了"
SENT_2 = "我现在开始排雷。"
IDS_1 = [42016, 78228, 80578, 0, 37046, 164, 116, 102, 84949, 222, 30590, 97565, 35287]
IDS_2 = [37046, 47551, 19000, 56386, 61056, 97565, 1811]


def test_cl100k_ids_of_first_course_sentence():
    assert tokenize(SENT_1).ids == IDS_1


def test_cl100k_ids_of_second_course_sentence():
    assert tokenize(SENT_2).ids == IDS_2


def test_token_zero_is_the_exclamation_mark():
    tok = tokenize(SENT_1)
    assert tok.tokens[3].id == 0 and tok.tokens[3].text == "!"


def test_partial_byte_tokens_show_as_hex_and_group_into_one_character():
    tok = tokenize(SENT_1)
    partial = tok.tokens[5:8]
    assert [t.id for t in partial] == [164, 116, 102]
    assert [t.text for t in partial] == ["<0xE8>", "<0xB8>", "<0xA9>"]
    assert all(t.partial for t in partial)
    assert len({t.group for t in partial}) == 1
    assert ("踩", [5, 6, 7]) in tok.groups
    assert "".join(chars for chars, _ in tok.groups) == SENT_1


def test_whole_character_tokens_are_not_partial():
    tok = tokenize(SENT_1)
    assert not tok.tokens[0].partial and tok.tokens[0].text == "同"


def test_r50k_base_loads_and_encodes():
    enc = load_encoding("r50k_base")
    assert enc.n_vocab == 50257
    assert tokenize("hello world", "r50k_base").ids == enc.encode("hello world")


def test_endoftext_is_plain_text_by_default():
    tok = tokenize("<|endoftext|>")
    assert 100257 not in tok.ids
    assert len(tok.ids) > 1
    assert not any(t.special for t in tok.tokens)


def test_endoftext_is_one_special_token_when_allowed():
    tok = tokenize("<|endoftext|>", allow_special=True)
    assert tok.ids == [100257]
    assert tok.tokens[0].special


def test_lone_surrogate_does_not_raise_and_sets_cleaned():
    tok = tokenize("a\ud800b")
    assert tok.cleaned
    assert tok.text == "a\ufffdb"
    assert len(tok.ids) >= 2


def test_clean_text_is_not_marked_cleaned():
    assert not tokenize(SENT_2).cleaned


def test_long_text_is_truncated_to_max_tokens():
    tok = tokenize("同志们!我踩着地雷了 " * 10_000, max_tokens=1000)  # 110 000 characters
    assert len(tok.ids) == 1000
    assert tok.truncated
    assert tok.n_chars == 110_000


def test_hundred_thousand_characters_truncated_to_max_tokens():
    tok = tokenize("x" * 100_000, max_tokens=1000)
    assert len(tok.ids) == 1000
    assert tok.truncated


def test_short_text_is_not_truncated():
    tok = tokenize(SENT_1, max_tokens=1000)
    assert not tok.truncated and tok.n_tokens_before_truncation is None


def test_empty_string_gives_zero_tokens():
    tok = tokenize("")
    assert tok.ids == [] and tok.groups == [] and not tok.truncated


def test_unknown_encoding_name_is_refused_and_never_read_as_a_path():
    for name in ("no_such_encoding_xyz", "../../../etc/passwd"):
        with pytest.raises(EncodingUnavailable) as info:
            load_encoding(name)
        assert info.value.code == "encoding_unknown" and "cl100k_base" in str(info.value)


def _offline(monkeypatch, tmp_path):
    def no_network(blobpath):
        raise ConnectionError(f"offline: refused to fetch {blobpath}")

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)  # never touch the network (no hang)
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})  # tiktoken's own per-process cache
    monkeypatch.setattr(tokmod, "_cache", {})  # ours
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))


def test_shipped_encodings_work_offline_with_an_empty_cache(monkeypatch, tmp_path):
    """cl100k_base and r50k_base load from assets/encodings with no network and an empty TIKTOKEN_CACHE_DIR."""
    _offline(monkeypatch, tmp_path)
    assert load_encoding("cl100k_base").encode("hello world") == [15339, 1917]
    assert load_encoding("r50k_base").n_vocab == 50257
    assert list(tmp_path.iterdir()) == []  # nothing written into the cache


def test_shipped_file_with_the_wrong_hash_is_refused(monkeypatch, tmp_path):
    (tmp_path / "cl100k_base.tiktoken").write_bytes(b"aGVsbG8= 0\n")
    monkeypatch.setattr(tokmod, "BUNDLED", tmp_path)
    monkeypatch.setattr(tokmod, "_cache", {})
    monkeypatch.setattr(tiktoken.load, "read_file", lambda p: (_ for _ in ()).throw(ConnectionError(p)))
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(EncodingUnavailable) as info:
        load_encoding("cl100k_base")
    assert info.value.code == "encoding_unavailable"


def test_offline_without_a_shipped_file_raises_encoding_unavailable_naming_the_cache(monkeypatch, tmp_path):
    """An encoding that is not shipped, an empty cache dir and no network: a clear error naming TIKTOKEN_CACHE_DIR."""
    _offline(monkeypatch, tmp_path)
    with pytest.raises(EncodingUnavailable) as info:
        load_encoding("p50k_base")
    message = str(info.value)
    assert "p50k_base" in message and "TIKTOKEN_CACHE_DIR" in message
    assert list(tmp_path.iterdir()) == []


def test_encoding_is_loaded_once_per_process():
    assert load_encoding("cl100k_base") is load_encoding("cl100k_base")
    assert isinstance(load_encoding("cl100k_base"), tiktoken.Encoding)


def test_padded_batch_of_course_sentences_pads_second_row_with_zero():
    ids, lengths, _ = padded_batch([SENT_1, SENT_2])
    assert ids.shape == (2, 13)
    assert ids[0].tolist() == IDS_1
    assert ids[1].tolist() == IDS_2 + [0] * 6
    assert lengths.tolist() == [13, 7]


def test_padding_mask_ignores_real_token_zero():
    ids, lengths, mask = padded_batch([SENT_1, SENT_2])
    assert ids[0, 3] == 0 and bool(mask[0, 3])  # '!' is id 0 and stays a real token
    assert bool(mask[0].all())
    assert mask[1].tolist() == [True] * 7 + [False] * 6
    assert torch.equal(mask, padding_mask(lengths, ids.size(1)))
    assert not torch.equal(mask, ids != 0)  # the course's `id == 0` mask would hide '!'


def test_by_line_encoding_keeps_line_ends_apart_and_decodes_to_the_same_text():
    from transformer_core.text.tokenizer import encode_by_line

    enc = load_encoding("cl100k_base")
    for text in ("床前明月光，疑是地上霜。\n举头望明月，", "earth.\nAnd God said\n\n", "one line", "", "\n"):
        ids = encode_by_line(enc, text)
        assert enc.decode(ids) == text
        assert all("\n" not in enc.decode([i]) or enc.decode([i]) == "\n" for i in ids), text  # never "。\n"
    assert encode_by_line(enc, "one line") == enc.encode("one line")
    whole = tokenize("霜。\n举", "cl100k_base")
    by_line = tokenize("霜。\n举", "cl100k_base", by_line=True)
    assert "。\n" in [t.text for t in whole.tokens] and "。\n" not in [t.text for t in by_line.tokens]


def test_a_download_that_never_answers_blocks_no_one_else_and_its_caller_gets_a_message(monkeypatch, tmp_path):
    """A network that accepts and never answers: everyone else's tokenizers load while a learner's request for
    p50k_base waits, a learner who gives up after DOWNLOAD_WAIT_S gets a clear message, and once the network answers
    the waiting request and the next one get the encoding. No clock is read: the order of events is the check (a
    bound of 0.9 s on the other loads failed on a busy machine)."""
    import threading

    answer = threading.Event()
    monkeypatch.setattr(tokmod, "_cache", {})
    monkeypatch.setattr(tokmod, "_pending", {})
    monkeypatch.setattr(tokmod, "DOWNLOAD_WAIT_S", 120.0)  # the first learner waits as long as the test needs

    def hanging(name):
        answer.wait(60)  # the download hangs until the test lets it answer
        return tokmod._bundled("r50k_base")  # what the "download" brings (from assets/: no network in CI)
    monkeypatch.setattr(tiktoken, "get_encoding", hanging)
    errors, got = [], []

    def ask():
        try:
            got.append(load_encoding("p50k_base"))
        except EncodingUnavailable as exc:
            errors.append(exc)
    waiting = threading.Thread(target=ask)
    waiting.start()
    while "p50k_base" not in tokmod._pending and waiting.is_alive():
        waiting.join(0.01)  # until its download is under way
    assert load_encoding("cl100k_base").encode("hello world") == [15339, 1917]  # shipped: never waits
    assert load_encoding("cl100k_8k").n_vocab > 8000
    assert waiting.is_alive() and not errors and not got  # both loaded while the download still hung
    monkeypatch.setattr(tokmod, "DOWNLOAD_WAIT_S", 0.1)
    ask()  # a second learner gives up: a message, not a hang
    assert len(errors) == 1 and errors[0].code == "encoding_unavailable"
    for lang in ("en", "zh"):
        text = errors[0].text(lang)
        assert "p50k_base" in text and "Error" not in text and "{" not in text
    assert "no answer in time" in errors[0].text("en") and "超时" in errors[0].text("zh")
    answer.set()
    waiting.join(60)
    assert not waiting.is_alive() and got[0].n_vocab == 50257 and len(errors) == 1  # the first one got it
    assert load_encoding("p50k_base").n_vocab == 50257  # the next request finds the finished load


def test_a_failed_download_says_why_in_words_and_is_tried_again(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(tokmod, "_cache", {})
    monkeypatch.setattr(tokmod, "_pending", {})

    def refused(name):
        calls.append(name)
        raise ConnectionError("refused")
    monkeypatch.setattr(tiktoken, "get_encoding", refused)
    for _ in range(2):
        with pytest.raises(EncodingUnavailable) as info:
            load_encoding("p50k_base")
        assert "no network connection" in info.value.text("en") and "没有网络连接" in info.value.text("zh")
        assert "ConnectionError" not in info.value.text("en")
    assert calls == ["p50k_base", "p50k_base"]  # the failure is not cached: the second request tries again


def test_a_sequence_starting_mid_character_keeps_the_orphan_byte_apart():
    """A window of a text can start with the last byte of a character: that byte stays alone (shown as bytes) and the
    characters after it are still named by their pieces (a neuron's snippet once read "�仪式现场。中华 1/9")."""
    from transformer_core.text.tokenizer import label_pieces

    raws = [b"\x98", b"\xe4\xb8", b"\xad", b"a", b"\xe5", b"\x9b\xbd"]
    labels = ["<0x98>", "<0xE4><0xB8>", "<0xAD>", "a", "<0xE5>", "<0x9B><0xBD>"]
    assert label_pieces(raws, labels) == ["<0x98>", "中\u00a01/2", "中\u00a02/2", "a", "国\u00a01/2", "国\u00a02/2"]
    assert label_pieces(raws[:5], labels[:5])[4] == "<0xE5>"  # cut off at the end too: its bytes, not "� 1/2"


def test_text_around_a_token_reads_whole_characters_and_drops_those_cut_by_the_window():
    """A neuron's snippet: the text either side of one token, not its neighbours' labels joined ("操 1/3操 2/3...")."""
    fu, wo = "福".encode(), "我".encode()
    raws = [wo[1:], b" a", fu[:2], fu[2:], "好x".encode(), wo[:1]]  # cut at both ends; 福 in two pieces
    assert tokmod.text_around(raws, 2) == (" a", "好x")  # 福's other piece goes with the token, not "after"
    assert tokmod.text_around(raws, 3) == (" a", "好x")
    assert tokmod.text_around(raws, 4) == (" a福", "")  # any text cut anywhere: tests/core/test_properties.py


def test_an_id_with_no_token_decodes_as_its_number_not_an_error():
    """A hub model's output layer may be wider than its tokenizer (Qwen: 151,936 rows, 151,669 tokens); a prediction
    of an id in that gap once raised KeyError on the Lens, Ablation and Compare pages (read as their answer)."""
    from transformer_core.text.tokenizer import decode, load_encoding

    enc = load_encoding("cl100k_base")
    hole = 100_261  # between cl100k_base's special tokens (100,257-100,260 and 100,276): no token
    assert decode([9906, hole, 0], "cl100k_base") == f"Hello<{hole}>!"
    assert decode([9906, 0], "cl100k_base") == "Hello!" == enc.decode([9906, 0])
