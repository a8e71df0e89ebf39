"""The translation task: English dates and numbers into Chinese by documented rules, a held-out split by value,
a vocabulary that covers every input, and batches for teacher forcing."""
import random

import pytest

from transformer_core.train.tasks import TASKS
from transformer_core.train.translation import (
    KINDS,
    chinese_date,
    chinese_number,
    english_date,
    english_number,
    split,
    universe,
)

TASK = TASKS["dates"]


@pytest.mark.parametrize(("n", "zh"), [
    (0, "零"), (7, "七"), (10, "十"), (12, "十二"), (20, "二十"), (110, "一百一十"), (112, "一百一十二"),
    (412, "四百一十二"), (1005, "一千零五"), (1010, "一千零一十"), (1200, "一千二百"), (10500, "一万零五百"),
    (10010, "一万零一十"), (12345, "一万二千三百四十五"), (100010, "十万零一十"), (2026, "二千零二十六"),
])
def test_chinese_numbers_follow_the_written_rules(n, zh):
    assert chinese_number(n) == zh


@pytest.mark.parametrize(("n", "en"), [
    (0, "zero"), (15, "fifteen"), (45, "forty-five"), (400, "four hundred"), (412, "four hundred and twelve"),
    (1005, "one thousand and five"), (1050, "one thousand and fifty"),
    (1234, "one thousand two hundred and thirty-four"), (12000, "twelve thousand"),
])
def test_english_numbers_in_british_words(n, en):
    assert english_number(n) == en


def test_dates_in_both_english_orders_give_one_chinese_date():
    assert english_date(2026, 11, 23, "date_dmy") == "23 November 2026"
    assert english_date(2026, 11, 23, "date_mdy") == "November 23, 2026"
    assert chinese_date(2026, 11, 23) == "2026年11月23日"
    dates = {e.src for e in universe() if e.kind.startswith("date")}
    assert "29 February 2024" in dates and "29 February 2023" not in dates and "29 February 2000" in dates


def test_the_held_out_split_holds_out_values_not_just_strings():
    train, held = split(universe())
    assert 0.03 < len(held) / (len(train) + len(held)) < 0.07
    assert not {e.key for e in train} & {e.key for e in held}  # both English forms of a value go together
    assert {e.kind for e in held} == set(KINDS)


def test_the_vocabulary_covers_every_input_and_answer_without_the_unknown_token():
    rng = random.Random(0)
    for e in rng.sample(universe(), 2000):
        src, tgt = TASK.pair(e)
        assert TASK.vocab.unk not in src + tgt
        assert tgt[0] == TASK.vocab.special("bos") and tgt[-1] == TASK.vocab.special("eos")


def test_training_samples_never_come_from_the_held_out_values():
    held = {e.src for e in TASK.splits[1]}
    rng = random.Random(5)
    assert not {TASK.sample(rng).src for _ in range(3000)} & held


def test_batches_are_teacher_forced_with_the_answer_shifted_by_one():
    ex = TASK.sample(random.Random(1))
    b = TASK.batch([ex])
    src, tgt = TASK.pair(ex)
    assert b.src[0].tolist() == src and b.tgt[0].tolist() == tgt[:-1] and b.labels[0].tolist() == tgt[1:]


def test_the_example_target_a_learner_sees_is_the_decoder_input_of_teacher_forcing():
    from transformer_core.train.tasks import Example

    answer = Example(TASK.example.src, "2026年11月23日")
    assert TASK.to_ids(TASK.example.tgt) == TASK.pair(answer)[1][:-1]  # "=" (BOS) + the answer, no EOS
