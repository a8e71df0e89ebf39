"""Any answer, any metric: answers typed as text, scored by their summed log-probability; the sweeps on them; the
patching sweeps' normalised scale; the corrupted-text presets; bad answers. Each number is recomputed here by an
independent path: plain forwards of the model (model(ids)), log_softmax by hand, edits by intervene()."""
import numpy as np
import pytest
import torch

from transformer_core import load_model, prepare
from transformer_core.analysis.answers import (
    MAX_CHARS,
    answer_of_ids,
    answer_of_text,
    score_answer,
    score_answers,
    with_space,
)
from transformer_core.analysis.corruptions import (
    ioi_corruption,
    next_word,
    random_tokens,
    repeated_name,
    replace_word,
    words,
)
from transformer_core.analysis.head_effects import head_effects, head_patching, normalised, residual_effects
from transformer_core.analysis.interventions import ablation_edits, intervene
from transformer_core.analysis.logit_lens import answer_row, lens_from_trace, lens_logits, residual_names
from transformer_core.errors import InputError, message
from transformer_core.model.hooks import act_name
from transformer_core.text.tokenizer import tokenize

IOI = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"  # one token differs: " John" -> " Mary"


def plain_logprobs(model, ids: list[int], n: int) -> torch.Tensor:
    """(n,) log p of the last n ids, each read at the position before it: one plain forward, log_softmax by hand."""
    with torch.no_grad():
        logits = model(torch.tensor([ids]))[0].double()  # (T, vocab)
    logp = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    T = len(ids)
    return torch.stack([logp[T - n - 1 + i, ids[T - n + i]] for i in range(n)])


def test_a_multi_token_answer_is_its_summed_log_probability_after_the_text(gpt):
    answer = answer_of_text(gpt, " Johnathan小明")
    assert len(answer) > 1
    prep = prepare(gpt, IOI)
    joint = prepare(gpt, IOI + " Johnathan小明").src_ids[0].tolist()  # the text and the answer typed together
    assert joint == prep.src_ids[0].tolist() + list(answer.ids)  # the answer's tokens, no merge across the boundary
    score = score_answer(gpt, prep, " Johnathan小明")
    expected = plain_logprobs(gpt, joint, len(answer))
    np.testing.assert_allclose(score.logprobs, expected.numpy(), atol=1e-5)
    assert score.total == pytest.approx(float(expected.sum()), abs=1e-5)
    assert score.prob == pytest.approx(float(expected.sum().exp()), rel=1e-4)


def test_answers_scored_together_share_their_forwards_and_equal_each_scored_by_hand(gpt, monkeypatch):
    """One-token answers are all read from the text's own forward, answers of n tokens from the forward of the text
    and their first n - 1; each equals the plain forward's log-softmax on the rows it is read on."""
    from transformer_core.analysis import answers as module

    prep, forwards, read = prepare(gpt, IOI), [], module.run_with_trace
    monkeypatch.setattr(module, "run_with_trace", lambda *a, **k: forwards.append(a[1].size(1)) or read(*a, **k))
    typed = [" Mary", " John", " Johnathan", " Johnny", "小明"]
    scores = score_answers(gpt, prep, typed)
    spelled = [answer_of_text(gpt, a) for a in typed]
    T = prep.src_ids.size(1)
    prefixes = list(dict.fromkeys(a.ids[:-1] for a in spelled))  # one forward per distinct prefix, in order
    assert len(prefixes) < len(typed) and forwards == [T + len(x) for x in prefixes]
    for answer, score in zip(spelled, scores, strict=True):
        joint = prep.src_ids[0].tolist() + list(answer.ids)
        np.testing.assert_allclose(score.logprobs, plain_logprobs(gpt, joint, len(answer)).numpy(), atol=1e-5)
        assert score.answer == answer


def test_logit_difference_of_one_token_answers_is_the_plain_logit_difference(gpt):
    prep = prepare(gpt, IOI)
    mary, john = answer_of_text(gpt, " Mary"), answer_of_text(gpt, " John")
    assert len(mary) == len(john) == 1
    with torch.no_grad():
        last = gpt(prep.src_ids)[0, -1].double()
    res = head_effects(gpt, prep, "logit_diff", " Mary", " John")
    assert res.intact == pytest.approx(float(last[mary.first] - last[john.first]), abs=1e-5)
    assert res.token_a == mary.ids and res.token_b == john.ids


def test_the_head_most_needed_is_the_one_whose_knock_out_hurts_most():
    """On the name-mover model's IOI sentence the head that moves logit(Tom) − logit(Anna) most raises it; the head
    the answer needs is the one that lowers it most. For the loss, a hurt is a rise; none at all: None."""
    from transformer_core.analysis.head_effects import HeadEffects

    model, _ = load_model("name-movers")
    res = head_effects(model, prepare(model, "When Tom and Anna arrived at the party, Anna handed the gift to"),
                       "logit_diff", " Tom", " Anna")
    grid = res.heads["dec_self"]
    assert res.largest()[3] > 0 > grid.min()  # the largest move is a rise
    layer, head = np.unravel_index(grid.argmin(), grid.shape)
    assert res.most_needed() == ("dec_self", layer, head, pytest.approx(grid.min()))
    loss = HeadEffects("loss", "zero", None, None, 1.0, {"dec_self": np.array([[-0.2, 0.1, 0.3]])}, np.zeros(1))
    assert loss.most_needed() == ("dec_self", 0, 2, pytest.approx(0.3))
    none = HeadEffects("logprob", "zero", (1,), None, -1.0, {"dec_self": np.array([[0.2, 0.1]])}, np.zeros(1))
    assert none.most_needed() is None


@pytest.mark.parametrize("metric", ["logit_diff", "logprob", "prob"])
def test_knocking_out_a_head_on_multi_token_answers_equals_a_plain_forward_with_that_head_off(gpt, metric):
    """The batched sweep (resumed per layer, teacher-forced runs) against one edited plain forward of text + answer."""
    prep = prepare(gpt, IOI)
    a, b = answer_of_text(gpt, " Johnathan"), answer_of_text(gpt, "小明")
    assert len(a) > 1 and len(b) > 1
    res = head_effects(gpt, prep, metric, " Johnathan", "小明" if metric == "logit_diff" else None)
    text = prep.src_ids[0].tolist()

    def value():
        lp_a = float(plain_logprobs(gpt, text + list(a.ids), len(a)).sum())
        if metric == "logprob":
            return lp_a
        if metric == "prob":
            return float(np.exp(lp_a))
        return lp_a - float(plain_logprobs(gpt, text + list(b.ids), len(b)).sum())

    intact = value()
    assert res.intact == pytest.approx(intact, abs=1e-5)
    for layer, head in [(0, 1), (1, 0)]:
        with intervene(ablation_edits(gpt, [("dec_self", layer, head)])):
            assert res.heads["dec_self"][layer, head] == pytest.approx(value() - intact, abs=1e-5)
    with intervene(ablation_edits(gpt, ffn_layers=[("decoder", 1)])):
        assert res.ffn[1] == pytest.approx(value() - intact, abs=1e-5)


def test_patching_the_clean_text_into_the_corrupted_one_is_1_where_it_restores_it_and_0_where_nothing_differs(gpt):
    clean, corrupted = prepare(gpt, IOI), prepare(gpt, CORRUPT)
    ids_c, ids_k = clean.src_ids[0], corrupted.src_ids[0]
    assert ids_c.numel() == ids_k.numel()
    (changed,) = torch.nonzero(ids_c != ids_k)[:, 0].tolist()  # the S2 name's position
    for a, b in [(" Mary", " John"), (" Johnathan", "小明")]:  # one token each; several tokens each
        res = residual_effects(gpt, corrupted, clean, "logit_diff", a, b)  # run corrupted, patch from clean
        norm = res.normalised()
        assert norm is not None and np.isfinite(norm).all()
        assert norm[0, changed] == pytest.approx(1.0, abs=1e-4)  # the clean token's embedding: the clean run itself
        assert np.abs(norm[:, :changed]).max() < 1e-4  # before the change both runs are the same: 0 at every layer
        assert np.abs(norm[0, changed + 1:]).max() < 1e-4  # the embeddings after it are the same too
        if len(answer_of_text(gpt, a)) == 1:  # the last layer at the last position is the whole clean prediction
            assert norm[-1, -1] == pytest.approx(1.0, abs=1e-4)
        assert res.patched[0, changed] == pytest.approx(res.source, abs=1e-4)
        np.testing.assert_allclose(res.grid, res.patched - res.intact)


def test_patching_a_text_into_itself_changes_nothing_and_has_no_normalised_scale(gpt):
    corrupted = prepare(gpt, CORRUPT)
    for sweep in (residual_effects, head_patching):
        res = sweep(gpt, corrupted, corrupted, "logit_diff", " Mary", " John")
        assert np.abs(res.grid).max() < 1e-5  # identity: 0 everywhere
        assert res.normalised() is None  # clean == corrupted: no scale, never inf or NaN on the page
        assert np.isnan(res.arrays()["normalised"]).all()


def test_normalisation_is_guarded_when_clean_and_corrupted_agree():
    assert normalised([1.0, 2.0], 1.0, 1.0 + 1e-9) is None
    assert normalised([1.0, 2.0], 1.0, float("nan")) is None
    np.testing.assert_allclose(normalised([1.0, 2.0, 3.0], 1.0, 3.0), [0.0, 0.5, 1.0])


def test_head_patching_equals_one_head_patched_by_hand(gpt):
    clean, corrupted = prepare(gpt, IOI), prepare(gpt, CORRUPT)
    res = head_patching(gpt, corrupted, clean, "logit_diff", " Mary", " John")
    mary, john = answer_of_text(gpt, " Mary").first, answer_of_text(gpt, " John").first
    for layer, head in [(0, 1), (1, 0)]:
        name = act_name("z", layer=layer, block="dec_self")
        seen = {}
        with intervene({name: lambda z, seen=seen: seen.setdefault("z", z.clone())}), torch.no_grad():
            gpt(clean.src_ids)

        def take(z, h=head, seen=seen):
            z = z.clone()
            z[:, h] = seen["z"][:, h]
            return z

        with intervene({name: take}), torch.no_grad():
            last = gpt(corrupted.src_ids)[0, -1].double()
        assert res.patched[layer, head] == pytest.approx(float(last[mary] - last[john]), abs=1e-5)


def test_the_ioi_preset_changes_the_repeated_names_last_mention():
    assert repeated_name(IOI) == ("John", "Mary")
    assert ioi_corruption(IOI) == CORRUPT
    assert replace_word(IOI, "John", "Mary", every=True) == "When John and Mary went to the store, Mary gave a drink to"
    assert replace_word(IOI, "John", "Charlie") == "When Mary and John went to the store, Charlie gave a drink to"
    then = "Then, Alice and Bob went to the park. Bob gave a ball to"  # a name that also starts a sentence
    assert repeated_name(then) == ("Bob", "Alice")
    assert repeated_name("When the cat sat, the dog ran") is None  # no names: no IOI preset
    assert repeated_name("Today it rained. Today it snowed.") is None  # a sentence's first word is no name
    assert words("d a c b d")[:4] == ["d", "a", "c", "b"]
    zh = "昨天王芳和李娜下棋，李娜把这盘棋输给了"  # no spaces: the names either side of 和, two characters each
    assert repeated_name(zh) == ("李娜", "王芳") and words(zh)[:2] == ["李娜", "王芳"]
    assert ioi_corruption(zh) == "昨天王芳和李娜下棋，王芳把这盘棋输给了"
    assert replace_word(zh, "李娜", "王芳", every=True) == "昨天李娜和王芳下棋，王芳把这盘棋输给了"
    assert [next_word(w) for w in ("Mary", "李娜")] == [" Mary", "李娜"]


def test_swap_presets_refuse_what_they_cannot_swap():
    with pytest.raises(InputError) as err:
        replace_word(IOI, "John", "John")
    assert err.value.code == "corrupt_same"
    with pytest.raises(InputError) as err:
        replace_word(IOI, "Zed", "Mary")
    assert err.value.code == "corrupt_no_words"


def test_random_tokens_have_the_clean_texts_length(gpt):
    n = prepare(gpt, IOI).src_ids.size(1)
    one, two = random_tokens(gpt, n, seed=0), random_tokens(gpt, n, seed=1)
    assert one != two and prepare(gpt, one).src_ids.size(1) == n == prepare(gpt, two).src_ids.size(1)
    assert random_tokens(gpt, n, seed=0) == one  # the seed decides


@pytest.mark.parametrize(("text", "code"), [("", "answer_empty"), ("   \n\t", "answer_blank"),
                                            ("x" * 2000, "answer_long"), (" a b c d e f g h i j k l m n o p q",
                                                                          "answer_tokens")])
def test_bad_answers_get_a_message_in_both_languages(gpt, text, code):
    with pytest.raises(InputError) as err:
        answer_of_text(gpt, text)
    assert err.value.code == code
    assert message(code, "zh") != message("unexpected", "zh") and message(code, "en") != message(code, "zh")
    with pytest.raises(InputError):
        head_effects(gpt, prepare(gpt, IOI), "prob", text)


def test_end_of_text_is_plain_text_unless_special_tokens_are_allowed(gpt):
    plain = answer_of_text(gpt, "<|endoftext|>")
    assert plain.special_as_text and len(plain) > 1
    special = answer_of_text(gpt, "<|endoftext|>", allow_special=True)
    assert len(special) == 1 and not special.special_as_text
    assert score_answer(gpt, prepare(gpt, IOI), special).logprobs.shape == (1,)


def test_broken_unicode_is_replaced_and_an_answer_the_vocabulary_lacks_is_refused(gpt):
    broken = answer_of_text(gpt, "\ud800 John")
    assert broken.cleaned and "\ufffd" in broken.text
    letters, _ = load_model("repeat")  # a toy task's own alphabet: " a" … " k", nothing else
    assert answer_of_text(letters, " j").ids == tuple(prepare(letters, "a j").src_ids[0, 1:].tolist())
    with pytest.raises(InputError) as err:
        answer_of_text(letters, "小明")
    assert err.value.code == "answer_unknown" and "小" in str(err.value)


def test_an_answer_needs_room_after_the_text(gpt):
    full = prepare(gpt, " the" * 200)  # cut to the model's 64 positions
    assert full.src_ids.size(1) == gpt.cfg.max_len
    assert score_answer(gpt, full, " John").logprobs.shape == (1,)  # one token: read at the last position
    with pytest.raises(InputError) as err:
        score_answer(gpt, full, " Johnathan")
    assert err.value.code == "answer_no_room"


def test_quick_picks_and_spelling_hints(gpt):
    pick = answer_of_ids(gpt, [3842])
    assert pick.ids == (3842,) and pick.text == tokenize(pick.text, gpt.cfg.encoding).tokens[0].text
    assert with_space(gpt, answer_of_text(gpt, "John")).text == " John"
    assert with_space(gpt, answer_of_text(gpt, " John")) is None
    assert with_space(gpt, answer_of_text(gpt, "小明")) is None  # no spaces between Chinese words
    with pytest.raises(InputError):
        answer_of_ids(gpt, [gpt.cfg.vocab_size])
    with pytest.raises(InputError) as err:
        answer_of_text(gpt, "x" * (MAX_CHARS + 1))
    assert err.value.code == "answer_long"


def test_the_lens_answer_row_is_a_full_softmax_of_each_layer_for_the_answers_first_token(gpt):
    prep = prepare(gpt, IOI)
    from transformer_core.model.trace import run_with_trace

    _, trace = run_with_trace(gpt, prep.src_ids, names=residual_names(gpt) + ["hook_logits"])
    pos = prep.src_ids.size(1) - 1
    row = answer_row(gpt, trace, pos, " Johnathan")
    first = answer_of_text(gpt, " Johnathan").first
    for r, name in enumerate(residual_names(gpt)):
        logits = lens_logits(gpt, trace[name][0, pos]).double()
        assert row.probs[r] == pytest.approx(float(torch.softmax(logits, -1)[first]), abs=1e-6)
        assert row.ranks[r] == int((logits > logits[first]).sum()) + 1
    lens = lens_from_trace(gpt, trace, k=1)
    top = int(lens.ids[-1, pos, 0])
    np.testing.assert_array_equal(answer_row(gpt, trace, pos, top).ranks, lens.final_rank[:, pos].numpy())
    with pytest.raises(InputError):
        answer_row(gpt, trace, pos + 1, top)
