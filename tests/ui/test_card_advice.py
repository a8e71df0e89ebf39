"""A text model's card advises what its curves show: overfitting (validation rising while training falls), the
share of validation tokens that are ⟨unk⟩, never "train longer" when longer training made it worse."""
import pytest
from streamlit.testing.v1 import AppTest

from transformer_core.train.cards import user_text_card
from transformer_core.train.corpus import TEXT
from transformer_core.train.loop import train_text

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py

# small, fast and over-parameterised for 400 training tokens: validation loss bottoms out early, then climbs
OVERFIT = dict(d_model=32, n_heads=2, n_layers=2, dropout=0.0, lr=3e-3, max_iters=300, eval_interval=25, eval_iters=10,
               batch_size=16, seed=0, device="cpu", keep_best=True)


def _show_card():
    import streamlit as st

    from ui.cards import show_card

    show_card(st.session_state["card"], "advice")


@pytest.fixture(scope="module")
def run():
    result = train_text(TEXT, **OVERFIT)
    return result, user_text_card(result, 256)


def shown(card: dict, lang: str) -> list[str]:
    at = AppTest.from_function(_show_card, default_timeout=30)
    at.session_state["card"], at.session_state["lang"] = card, lang
    at.run()
    assert not at.exception
    return [m.value for kind in ("warning", "info", "caption") for m in getattr(at, kind)]


def test_an_overfitting_run_is_called_so_with_its_own_figures_and_keeps_the_best_weights(run):
    result, card = run
    h = result.history
    low = min(range(len(h.val_loss)), key=h.val_loss.__getitem__)
    assert h.val_loss[-1] > h.val_loss[low] + 0.5 and h.train_loss[-1] < h.train_loss[low]  # the run did overfit
    item = next(a for a in card["advice"] if a["code"] == "overfit")
    assert (item["low_step"], item["low_val"], item["last_step"], item["last_val"]) == (
        h.eval_steps[low], h.val_loss[low], h.eval_steps[-1], h.val_loss[-1])
    assert (item["low_train"], item["last_train"]) == (h.train_loss[low], h.train_loss[-1])
    assert result.best_step == item["kept"] == h.eval_steps[low] == card["best_step"]
    texts = shown(card, "en")
    overfit = next(s for s in texts if s.startswith("Overfitting"))
    for figure in (f"step {h.eval_steps[low]:,} ({h.val_loss[low]:.2f})", f"rose to {h.val_loss[-1]:.2f}",
                   f"step {h.eval_steps[-1]:,}", f"fell from {h.train_loss[low]:.2f} to {h.train_loss[-1]:.2f}",
                   "dropout", f"those of step {result.best_step:,}"):
        assert figure in overfit, (figure, overfit)
    assert not any("Train longer" in s or "train longer" in s for s in texts)
    assert any("过拟合" in s and f"{h.val_loss[low]:.2f}" in s for s in shown(card, "zh"))


def test_the_card_says_which_share_of_validation_tokens_is_unknown(run):
    result, card = run
    val, unk = result.data.splits["val"], result.data.vocab.unk
    n_unk, n_val = int((val == unk).sum()), len(val)
    train_tokens = set(result.data.splits["train"].tolist())
    assert unk not in train_tokens and n_unk == sum(int(i) not in train_tokens for i in val.tolist())
    item = next(a for a in card["advice"] if a["code"] == "unk")
    assert (item["n_unk"], item["n_val"]) == (n_unk, n_val)
    line = next(s for s in shown(card, "en") if "⟨unk⟩" in s)
    assert f"{n_unk} of the {n_val} validation tokens ({n_unk / n_val:.0%})" in line
    assert all(w in line for w in item["examples"]) and item["examples"]


def test_a_card_with_no_curves_keeps_the_old_sentence_and_a_falling_curve_says_train_longer():
    from transformer_core.train.advice import curve_advice
    from transformer_core.train.loop import History

    falling = History(eval_steps=[0, 50, 100], train_loss=[6.0, 5.0, 4.5], val_loss=[6.1, 5.3, 5.0])
    assert curve_advice(falling) == [{"code": "longer", "prev_step": 50, "prev_val": 5.3, "last_step": 100,
                                      "last_val": 5.0}]
    flat = History(eval_steps=[0, 50, 100], train_loss=[6.0, 5.0, 4.5], val_loss=[6.1, 5.3, 5.3])
    assert curve_advice(flat, (1, 100)) == []  # 1% ⟨unk⟩: nothing to say
    card = {"heldout_loss": 6.0, "bigram_loss": 5.0, "advice": curve_advice(falling)}
    texts = shown(card, "en")
    assert any("still falling" in s and "5.30 at step 50, 5.00 at step 100" in s for s in texts)
    assert any("20% above the bigram baseline" in s and "Train longer" not in s for s in texts)
    old = shown({"heldout_loss": 6.0, "bigram_loss": 5.0}, "en")
    assert any("Train longer" in s for s in old)
