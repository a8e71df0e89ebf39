"""The next word with its pieces joined: each probability recomputed by plain forwards of the model (no KV cache),
the rule of what continues a word, and an encoder-decoder's next word."""
import pytest
import torch

from transformer_core import build_model, load_model, prepare, preset
from transformer_core.analysis.next_word import continues, next_words

CAT = "The cat sat on the mat. The cat sat on the"


def plain_probs(model, ids: list[int]) -> torch.Tensor:
    """(vocab,) p of the next token after ids: one plain forward, softmax by hand."""
    with torch.no_grad():
        logits = model(torch.tensor([ids]))[0, -1].double()
    return (logits - torch.logsumexp(logits, -1)).exp()


def test_the_classroom_sentence_copies_mat_as_its_top_next_word_with_the_product_of_its_pieces():
    model, card = load_model("everyday-gpt")
    ids = prepare(model, CAT).src_ids[0].tolist()
    words = next_words(model, ids, top=10)
    assert words[0].text == " mat" and words[0].complete  # the default spells it " m" + "at"
    first, second = words[0].pieces[0]
    p1 = plain_probs(model, ids)
    p2 = plain_probs(model, ids + [first])
    assert abs(words[0].prob - float(p1[first] * p2[second])) < 1e-6
    assert int(p2.argmax()) == second  # the greedy continuation
    assert int(p1.argmax()) == first  # its top token is the piece " m", at the probability its card gives
    assert float(p1[first]) == pytest.approx(card["everyday"]["copy"]["cat"]["p"], abs=5e-4)
    assert sum(w.prob for w in words) <= 1 + 1e-9
    assert [w.prob for w in words] == sorted((w.prob for w in words), reverse=True)
    whole = next(w for w in words if len(w.pieces[0]) == 1)  # a one-token word: its token's own probability
    assert abs(whole.prob - float(p1[whole.pieces[0][0]])) < 1e-6


def test_what_continues_a_word():
    assert continues(b" m", b"at") and not continues(b" mat", b".") and not continues(b" m", b" at")
    assert continues("明".encode()[:2], "明".encode()[2:])  # the rest of an unfinished character
    assert not continues("明".encode(), "天".encode())  # a Chinese character is a word of its own
    assert not continues(b" 12", b"3") and not continues(b" m", None)


def test_an_encoder_decoder_model_gets_its_next_words_too():
    model = build_model(preset("tiny"), "cpu").eval()
    src, dec = [5, 6, 7, 8], [100256, 11]
    words = next_words(model, dec, src, top=5, first_tokens=8)
    assert len(words) == 5 and all(0 < w.prob <= 1 for w in words)
    with torch.no_grad():
        p = torch.softmax(model(torch.tensor([src]), torch.tensor([dec]))[0, -1].double(), -1)
    for w in words:
        if len(w.pieces) == 1 and len(w.pieces[0]) == 1:
            assert abs(w.prob - float(p[w.pieces[0][0]])) < 1e-6
