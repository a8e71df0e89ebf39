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
    in_domain,
    parse,
    split,
    translate,
    translate_batch,
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
    assert all(int(e.key[4:]) >= 10_000 for e in held if e.key.startswith("num:"))  # below: all trained on


def test_training_samples_every_number_length_by_its_weight():
    from transformer_core.train.translation import DIGIT_WEIGHTS

    rng = random.Random(1)
    lengths = [len(e.src) for e in (TASK.sample(rng) for _ in range(8000)) if e.src.isdigit()]
    for digits, weight in enumerate(DIGIT_WEIGHTS, 1):  # 1-digit numbers 1/8 of the draws (uniform by value: 0.01 %)
        share = lengths.count(digits) / len(lengths)
        assert abs(share - weight / sum(DIGIT_WEIGHTS)) < 0.03, (digits, share)


@pytest.mark.parametrize(("text", "kind"), [
    ("7", "digits"), ("12", "digits"), ("99999", "digits"), ("zero", "words"), ("nineteen", "words"),
    ("one thousand and five", "words"), ("29 February 2024", "date_dmy"), ("November 23, 2026", "date_mdy"),
    ("hello", None), ("100000", None), ("31 February 2026", None), ("12.5", None), ("29 February 2023", None),
    ("007", None), ("", None), ("1 January 1899", None), ("<|endoftext|>", None),
])
def test_the_domain_is_exactly_what_the_generator_writes(text, kind):
    got = parse(text)
    assert (got[0] if got else None) == kind and in_domain(text) == (kind is not None)


def test_every_generated_input_is_in_the_domain_and_fits_the_model():
    rng = random.Random(3)
    for e in rng.sample(universe(), 3000):
        assert parse(e.src) == (e.kind, e.tgt)
        src, tgt = TASK.pair(e)
        assert len(src) <= TASK.max_len and len(tgt) <= TASK.max_len


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


@pytest.fixture(scope="module")
def dates_model():
    from pathlib import Path

    from transformer_core.train.checkpoint import load_checkpoint

    return load_checkpoint(Path(__file__).resolve().parents[2] / "assets" / "models" / "dates-zh")[0]


@pytest.mark.usefixtures("one_torch_thread")
def test_every_number_below_1000_translates_exactly_in_digits_and_words(dates_model):
    texts = [str(n) for n in range(1000)] + [english_number(n) for n in range(1000)]
    got = translate_batch(dates_model, texts)
    wrong = [(x, g) for x, g, n in zip(texts, got, [*range(1000), *range(1000)]) if g != chinese_number(n)]
    assert not wrong, wrong[:10]


@pytest.mark.usefixtures("one_torch_thread")
def test_translate_gives_a_string_for_any_text_and_stops_at_the_end_of_text(dates_model):
    assert translate(dates_model, "23 November 2026") == "2026年11月23日"
    for text in ("hello", "", "🙂", "<|endoftext|>", "x" * 500):
        out = translate(dates_model, text)
        assert isinstance(out, str) and "<|endoftext|>" not in out


def test_round_numbers_are_sampled_often_enough_to_be_learned():
    """Half the numbers of two or more digits are drawn with trailing zeros: 12,000-like values were 90 of 90,000
    five-digit numbers and came out as "一万二千零"."""
    rng = random.Random(3)
    numbers = [e.src for e in (TASK.sample(rng) for _ in range(8000)) if e.src.isdigit()]
    five = [n for n in numbers if len(n) == 5]
    round_thousands = sum(n.endswith("000") for n in five) / len(five)
    assert 0.15 < round_thousands < 0.35  # zeros 3 or 4 of 1..4, half the time: 0.25 (uniform by value: 0.001)


@pytest.mark.usefixtures("one_torch_thread")
def test_round_numbers_and_padded_input_translate_exactly(dates_model):
    values = [k * 1000 for k in range(1, 100)] + [k * 10_000 for k in range(1, 10)] + [k * 100 for k in range(1, 100)]
    texts = [str(n) for n in values] + [english_number(n) for n in values]
    got = translate_batch(dates_model, texts)
    wrong = [(x, g) for x, g, n in zip(texts, got, values * 2) if g != chinese_number(n)]
    assert not wrong, wrong[:10]
    assert translate(dates_model, "  12  ") == "十二"  # spaces around the number are no part of it
