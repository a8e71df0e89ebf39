"""BPE playback: every merge is the lowest-rank (leftmost) adjacent pair of a plain re-implementation, every token
of English, Chinese and emoji text ends as one piece, and each pre-token chunk plays back to tiktoken's encoding."""
import pytest
import tiktoken

from transformer_core import InputError
from transformer_core.analysis.bpe import byte_pair_parts, chunks, merge_steps, text_merges, token_playback
from transformer_core.text.tokenizer import load_encoding

TEXTS = [
    "The transformer's attention weights aren't magic: they're softmax rows.",
    "我现在开始排雷。同志们!我踩着地雷了",
    "Emoji 🎉👩‍👩‍👧 and café naïve résumé\n\n  indented   spaces\t\ttabs 12345678 <|endoftext|>",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
]


def naive_steps(piece: bytes, ranks: dict[bytes, int]) -> list[tuple[tuple[bytes, ...], int]]:
    """The textbook loop: merge the leftmost adjacent pair of lowest rank until no pair is a token."""
    parts, out = [piece[i:i + 1] for i in range(len(piece))], []
    while True:
        pairs = [(ranks[parts[i] + parts[i + 1]], i) for i in range(len(parts) - 1) if parts[i] + parts[i + 1] in ranks]
        if not pairs:
            return out
        rank, i = min(pairs)
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
        out.append((tuple(parts), rank))


@pytest.mark.parametrize("encoding", ["cl100k_base", "r50k_base"])
@pytest.mark.parametrize("text", TEXTS, ids=["english", "chinese", "emoji", "repeats"])
def test_every_token_is_rebuilt_by_its_merges_as_the_textbook_loop_does(encoding, text):
    enc = load_encoding(encoding)
    ranks = enc._mergeable_ranks
    for token_id in enc.encode_ordinary(text):
        playback = token_playback(token_id, encoding)
        raw = enc.decode_single_token_bytes(token_id)
        assert playback.raw == raw
        final = playback.steps[-1].parts if playback.steps else (raw,)
        assert final == (raw,), raw
        assert playback.n_merges == len(raw) - 1
        assert [(s.parts, s.rank) for s in playback.steps] == naive_steps(raw, ranks)
        for s in playback.steps:
            assert ranks[s.pair[0] + s.pair[1]] == s.rank and s.parts[s.at] == s.pair[0] + s.pair[1]


@pytest.mark.parametrize("encoding", ["cl100k_base", "r50k_base"])
@pytest.mark.parametrize("text", TEXTS, ids=["english", "chinese", "emoji", "repeats"])
def test_each_chunk_plays_back_to_tiktokens_encoding(encoding, text):
    enc = load_encoding(encoding)
    ranks = enc._mergeable_ranks
    pieces = chunks(text, encoding)
    assert "".join(pieces) == text
    for piece in pieces:
        parts = byte_pair_parts(piece.encode("utf-8"), ranks)
        assert [ranks[p] for p in parts] == enc._encode_single_piece(piece), piece
        steps = merge_steps(piece.encode("utf-8"), ranks)
        assert (steps[-1].parts if steps else tuple(bytes([b]) for b in piece.encode("utf-8"))) == tuple(parts)
    merged = text_merges(text, encoding)
    assert merged.ids == enc.encode_ordinary(text)
    assert [t.n_merges for t in merged.tokens] == [len(enc.decode_single_token_bytes(i)) - 1 for i in merged.ids]
    assert merged.n_merges == sum(t.n_merges for t in merged.tokens)


def test_ties_merge_the_leftmost_pair_first_as_tiktoken_does():
    ranks = {b"a": 0, b"b": 1, b"aa": 2, b"ab": 3, b"aaa": 4, b"ba": 5}
    steps = merge_steps(b"aaaa", ranks)
    assert [s.parts for s in steps] == [(b"aa", b"a", b"a"), (b"aa", b"aa")]
    enc = tiktoken.Encoding("toy", pat_str=r"\S+", mergeable_ranks=ranks, special_tokens={})
    for piece in (b"aaaa", b"aaab", b"abab", b"baaab", b"aaaaaaa", b"babababaaa"):
        assert [ranks[p] for p in byte_pair_parts(piece, ranks)] == enc._encode_single_piece(piece), piece


def test_special_tokens_and_unknown_ids_have_no_playback():
    enc = load_encoding("cl100k_base")
    for bad in (enc.eot_token, 100256, -1, 10**9, "x"):
        with pytest.raises(InputError) as err:
            token_playback(bad)
        assert err.value.code == "bpe_not_merged"


def test_broken_unicode_does_not_crash_the_playback():
    assert text_merges("a\ud800b").ids == load_encoding("cl100k_base").encode_ordinary("a\ufffdb")
