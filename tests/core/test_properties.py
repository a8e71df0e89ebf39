"""Property tests: any text, broken Unicode included, never crashes the tokenizer or the traced forward."""
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformer_core import InputError, tokenize, trace_text

SPECIALS = ["<|endoftext|>", "<|fim_prefix|>", "<|endofprompt|>", "\x00", "\ud800", "\udfff", "!", " "]

# any code point, lone surrogates (category Cs) and NUL included, mixed with special-token text
CHARS = st.one_of(
    st.characters(codec=None),
    st.characters(categories=["Cs"]),
    st.just("\x00"),
)
TEXT = st.one_of(
    st.text(alphabet=CHARS, max_size=5000),
    st.lists(st.one_of(st.sampled_from(SPECIALS), st.text(alphabet=CHARS, max_size=20)), max_size=50).map("".join),
)

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                     HealthCheck.function_scoped_fixture])


@FAST
@given(text=TEXT, allow_special=st.booleans())
def test_tokenize_never_raises_on_any_text(text, allow_special):
    tok = tokenize(text, allow_special=allow_special, max_tokens=256)
    assert len(tok.ids) <= 256
    assert all(0 <= i < 100277 for i in tok.ids)
    assert sum(len(members) for _, members in tok.groups) == len(tok.ids)


@FAST
@given(text=TEXT, allow_special=st.booleans())
def test_trace_text_gives_input_error_or_a_clean_trace(tiny_gpt, text, allow_special):
    try:
        prep, trace = trace_text(tiny_gpt, text, allow_special=allow_special)
    except InputError:
        assert not text.strip()  # the only InputError a full-vocabulary model gives is empty text
        return
    assert text.strip()
    assert 1 <= prep.src_ids.size(1) <= tiny_gpt.cfg.max_len
    for block in trace.blocks():
        stages = trace.attention(*block)
        weights, mask = stages["weights"], stages["mask"]
        assert not torch.isnan(weights).any(), block
        assert torch.all(weights[~mask] == 0), block
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-6, rtol=0)
    assert torch.isfinite(trace.logits).all()


@FAST
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=40),
       cuts=st.lists(st.integers(0, 160), max_size=12), data=st.data())
def test_text_around_any_token_of_any_text_cut_anywhere_leaves_the_rest_whole(text, cuts, data):
    """A neuron snippet's sides: split a text's bytes anywhere into tokens; for any token, the text before it and after
    it are the characters wholly outside it (a character it shares a byte with goes with the token)."""
    from transformer_core.text.tokenizer import text_around

    raw = text.encode("utf-8")
    edges = [0, *sorted(c for c in cuts if c < len(raw)), len(raw)]
    raws = [raw[a:b] for a, b in zip(edges, edges[1:])]
    k = data.draw(st.integers(0, len(raws) - 1))
    before, after = text_around(raws, k)
    spans, pos = [], 0
    for ch in text:  # each character's bytes
        spans.append((pos, pos + len(ch.encode("utf-8"))))
        pos = spans[-1][1]
    a, b = edges[k], edges[k + 1]
    hit = [i for i, (s, e) in enumerate(spans) if (s < b and e > a) or (a == b and s < a < e)]
    if hit:
        assert (before, after) == (text[:hit[0]], text[hit[-1] + 1:])
    else:  # an empty token between two characters
        assert before + after == text


@FAST
@given(raws=st.lists(st.binary(max_size=4), min_size=1, max_size=20), data=st.data())
def test_text_around_any_bytes_never_raises(raws, data):
    from transformer_core.text.tokenizer import text_around

    before, after = text_around(raws, data.draw(st.integers(0, len(raws) - 1)))
    assert len(before.encode("utf-8")) + len(after.encode("utf-8")) <= len(b"".join(raws))
