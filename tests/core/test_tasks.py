"""Synthetic tasks: real cl100k tokens, compacted vocabularies, batches, accuracy on fresh examples."""
import random

import pytest
import torch

from transformer_core.model.trace import run
from transformer_core.model.transformer import build_model
from transformer_core.text.inputs import prepare
from transformer_core.text.tokenizer import load_encoding
from transformer_core.train.data import IGNORE
from transformer_core.train.tasks import BOS, TASKS, Example, TaskError, encode, get_task, single_token

SEQ2SEQ = ("copy", "reverse", "sort")


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py


@pytest.mark.parametrize("name", sorted(n for n in TASKS if TASKS[n].vocab_texts()))  # the symbol tasks
def test_every_vocabulary_text_is_one_cl100k_token_and_the_map_is_sorted_real_ids(name):
    task = TASKS[name]
    ids = [single_token(t) for t in task.vocab_texts()]
    assert task.vocab_map == tuple(sorted(set(ids)))
    assert len(task.vocab_map) == len(task.vocab_texts())


def test_letters_come_in_both_forms_start_and_after_a_space():
    enc = load_encoding("cl100k_base")
    strings = {enc.decode([i]) for i in TASKS["copy"].vocab_map}
    assert {"a", " a", "j", " j", BOS} <= strings
    assert single_token("a") != single_token(" a")


@pytest.mark.parametrize("name", sorted(TASKS))
def test_typed_example_gets_the_trained_tokens_through_the_app_pipeline(name):
    task = TASKS[name]
    model = build_model(task.model_config(d_model=16, n_heads=2, n_layers=1, d_ffn=32), "cpu")
    prep = prepare(model, task.example.src, task.example.tgt or None)
    assert prep.src_ids[0].tolist() == task.to_ids(task.example.src)
    if task.arch == "encoder_decoder":
        assert prep.tgt_ids[0].tolist() == task.to_ids(task.example.tgt)  # BOS + the answer but its last


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_sample_round_trips_through_the_tokenizer(name):
    task, rng = TASKS[name], random.Random(3)
    for _ in range(50):
        ex = task.sample(rng)
        for text in (ex.src, ex.tgt):
            if text:
                enc = load_encoding(getattr(task, "encoding", None) or "cl100k_base")
                assert enc.decode([task.vocab_map[i] for i in task.to_ids(text)]) == text
        assert len(task.to_ids(ex.src)) + max(len(task.to_ids(ex.tgt)) - 1, 0) <= task.max_len


def test_seq2seq_answers_are_copy_reverse_and_sort_of_the_input():
    rng = random.Random(0)
    for name, fn in (("copy", lambda s: s), ("reverse", lambda s: s[::-1]), ("sort", sorted)):
        ex = TASKS[name].sample(rng)
        assert ex.tgt == f"{BOS} " + " ".join(fn(ex.src.split()))


def test_seq2seq_batch_is_teacher_forcing_with_lengths_and_ignored_padding():
    task = TASKS["reverse"]
    b = task.batch([Example("a b c", "= c b a"), Example("d e", "= e d")])
    ids = task.to_ids
    assert b.src[0].tolist() == ids("a b c") and b.src_lengths.tolist() == [3, 2]
    assert b.tgt[0].tolist() == ids("= c b") and b.tgt_lengths.tolist() == [3, 2]
    assert b.labels[0].tolist() == ids(" c b a")
    assert b.labels[1].tolist() == ids(" e d") + [IGNORE]


def test_padding_with_a_real_id_does_not_change_a_short_example():
    task = TASKS["copy"]
    model = build_model(task.model_config(d_model=16, n_heads=2, n_layers=1, d_ffn=32), "cpu")
    short = Example("d e", "= d e")
    alone = task.batch([short])
    padded = task.batch([short, Example("a b c d e f", "= a b c d e f")])
    out_alone = run(model, alone.src, alone.tgt, src_lengths=alone.src_lengths)
    out_padded = run(model, padded.src, padded.tgt, src_lengths=padded.src_lengths, tgt_lengths=padded.tgt_lengths)
    torch.testing.assert_close(out_padded[0, :2], out_alone[0], atol=1e-5, rtol=1e-5)


def test_repeat_scores_the_second_half_after_its_first_letter():
    task = TASKS["repeat"]
    ex = Example("d a c d a c")
    ids, trained, scored = task.targets(ex)
    assert len(ids) == 6 and trained == scored == [False, False, False, True, True]
    labels = task.batch([ex], scored=True).labels[0].tolist()
    assert labels == [IGNORE] * 3 + task.to_ids(" a c")


def test_repeat_spans_have_distinct_letters():
    rng = random.Random(1)
    for _ in range(50):
        syms = TASKS["repeat"].sample(rng).src.split()
        half = syms[: len(syms) // 2]
        assert syms == half + half and len(set(half)) == len(half)


def test_count_goes_up_by_one_step_and_scores_only_numbers_after_the_first_two():
    task, rng = TASKS["count"], random.Random(2)
    for _ in range(30):
        nums = [int(x) for x in task.sample(rng).src.split()]
        steps = {b - a for a, b in zip(nums, nums[1:])}
        assert len(steps) == 1 and steps <= {1, 2, 3} and max(nums) <= 99
    labels = task.batch([Example("4 7 10 13")], scored=True).labels[0].tolist()
    assert labels == [IGNORE] * 3 + task.to_ids("10") + [IGNORE] + task.to_ids("13")


def test_text_outside_the_vocabulary_names_the_token():
    with pytest.raises(TaskError, match="copy model only reads its own letters: ' z' is not one of them"):
        TASKS["copy"].to_ids("a b z")
    with pytest.raises(TaskError, match="(?i)unknown task"):
        get_task("translate")
    assert encode("a b") == [single_token("a"), single_token(" b")]


@pytest.mark.parametrize("name", sorted(TASKS))
def test_an_untrained_model_scores_low_on_fresh_examples(name):
    task = TASKS[name]
    model = build_model(task.model_config(d_model=16, n_heads=2, n_layers=1, d_ffn=32), "cpu")
    if name == "ioi":  # two names, one right: an untrained model is at chance, a half (± 0.022 at 512 sentences)
        assert abs(task.accuracy(model, n=512) - 0.5) < 0.07
    else:
        assert 0.0 <= task.accuracy(model, n=32) < 0.5


def test_expected_alignment_is_the_diagonal_for_copy_and_anti_diagonal_for_reverse():
    ex = Example("a b c d", "")
    copy = TASKS["copy"].expected_alignment(Example(ex.src, "= a b c d"))
    rev = TASKS["reverse"].expected_alignment(Example(ex.src, "= d c b a"))
    assert torch.equal(copy, torch.eye(4, dtype=torch.bool))
    assert torch.equal(rev, torch.eye(4, dtype=torch.bool).flip(1))
    srt = TASKS["sort"].expected_alignment(Example("c a c", "= a c c"))
    assert srt.tolist() == [[False, True, False], [True, False, True], [True, False, True]]


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_greedy_answers_with_as_many_tokens_as_the_input(name):
    task = TASKS[name]
    model = build_model(task.model_config(d_model=16, n_heads=2, n_layers=1, d_ffn=32), "cpu")
    src = torch.tensor([task.to_ids("d a c b")])
    assert task.greedy(model, src, torch.tensor([4]), 4).shape == (1, 4)
    assert isinstance(task.solve(model, "d a c b"), str)
    with pytest.raises(TaskError, match="(?i)type 1 to 31 letters"):
        task.solve(model, " ".join("a" * 40))


def test_the_name_mover_sentences_fit_and_the_texts_it_answers_badly_are_named_with_why():
    """The name-mover model answers nonsense on texts unlike its sentences (a name that opens the text: 'om'; a name
    it reads in pieces; two Chinese names with one surname): outside() says which and why; none of the task's own
    sentences, training or held out, in either language, is called outside."""
    from transformer_core.train import ioi

    rng = random.Random(0)
    for lang in ("en", "zh"):
        for held in (False, True):
            pool = ioi.names(lang, held)
            for template in rng.sample(ioi.templates(lang, held), min(40, len(ioi.templates(lang, held)))):
                a, b = rng.sample(pool, 2)
                assert ioi.outside(ioi.prompt(template, a, b, rng.choice((a, b)))) is None, template
    cases = {
        "Tom and Anna went to the store, Anna gave a drink to": ("bare", "Tom", ("T", "om")),
        "When Mary and John went to the store,\nJohn gave a drink to": ("bare", "John", ("\n", "J", "ohn")),
        "When Xavier and Quinn went to the store, Quinn gave a drink to": ("pieces", "Quinn", (" Qu", "in", "n")),
        "龘伟和李娜去了商店，李娜把一瓶水给了": ("pieces", "龘伟", ("龘\u00a01/2", "龘\u00a02/2")),
        "小明和小红去了商店，小红把一瓶水给了": ("same_start", "小明, 小红", ("小",)),
        "The cat sat on the mat. The cat sat on the": ("no_pair", "", ()),
        "When Tom and Anna went to the store, they gave a drink to": ("no_pair", "", ()),
    }
    for text, (reason, name, pieces) in cases.items():
        assert ioi.outside(text) == ioi.Outside(reason, name, pieces), text
