"""Watch a model learn: the shipped snapshots, every curve's numbers recomputed here from the snapshot weights through
an independent path (plain PyTorch forward hooks on the attention modules), and the page in both languages."""
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.apptest import array, figure, harness_language, no_pages_dir_mode, open_app
from service import catalog
from transformer_core.analysis.heads import default_length, induction_batch, vocab_ids
from transformer_core.train.snapshots import N_SNAPSHOTS, load_snapshot, load_steps, phases
from ui.i18n import strings

FOLDER = Path(__file__).resolve().parents[2] / "assets" / "models" / "induction-steps"


@pytest.fixture(scope="module")
def data():
    return load_steps(FOLDER)


def test_snapshots_are_dense_early_and_small(data):
    steps = data["steps"]
    assert len(steps) >= 30 and steps[0] == 1 and steps[-1] == len(data["loss"])
    gaps = np.diff(steps)
    assert gaps[0] < gaps[-1]  # dense where the change is fast
    assert (FOLDER / "snapshots.safetensors").stat().st_size <= 15 * 2**20 and len(steps) == N_SNAPSHOTS


def weights_by_hooks(model, seqs):
    """Softmax weights of every layer's attention, recomputed from q and k captured by hooks on W_q and W_k."""
    out, handles = {}, []
    for i, layer in enumerate(model.decoder.layers):
        attn = layer.self_attn
        handles.append(attn.W_q.register_forward_hook(lambda m, a, o, i=i: out.setdefault(("q", i), o)))
        handles.append(attn.W_k.register_forward_hook(lambda m, a, o, i=i: out.setdefault(("k", i), o)))
    with torch.no_grad():
        logits = model(seqs)
    for h in handles:
        h.remove()
    B, T, _ = seqs.shape[0], seqs.shape[1], None
    nh, hs = model.cfg.n_heads, model.cfg.head_dim
    maps = []
    for i in range(model.cfg.n_layers):
        q = out[("q", i)].view(B, T, nh, hs).transpose(1, 2)
        k = out[("k", i)].view(B, T, nh, hs).transpose(1, 2)
        s = (q @ k.transpose(-2, -1)) / hs ** 0.5
        s = s.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), float("-inf"))
        maps.append(torch.softmax(s, -1))
    return maps, logits


@pytest.mark.parametrize("index", [0, 9, 19, -1])
def test_every_curve_is_recomputed_from_the_snapshot_weights(data, index):
    step = data["steps"][index]
    model = load_snapshot(catalog.load("shipped:induction-steps", "cpu")[0], FOLDER, step)
    L = default_length(model)
    seqs = induction_batch(vocab_ids(model), L, 16, 0)
    maps, logits = weights_by_hooks(model, seqs)
    m = data["measures"][str(step)]
    for layer, w in enumerate(maps):
        prev = w[:, :, torch.arange(1, 2 * L), torch.arange(0, 2 * L - 1)].mean((0, 2))
        ind = w[:, :, L + torch.arange(L - 1), torch.arange(1, L)].mean((0, 2))
        assert np.allclose(prev.numpy(), m["previous_token"][layer], atol=2e-3)  # fp16 snapshot weights
        assert np.allclose(ind.numpy(), m["induction"][layer], atol=2e-3)
    nats = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), seqs[:, 1:], reduction="none")
    icl = float(nats[:, L:].mean() - nats[:, :L - 1].mean())
    assert icl == pytest.approx(m["icl"], abs=5e-2)


def test_what_the_page_says_is_read_off_the_curves(data):
    found = phases(data)
    assert 30 < found["steepest_drop"] < 300  # after the plateau, not the first fall from the random start
    assert found["induction_final"] > 0.5 and found["icl_final"] < -1 < found["icl_first"] + 1


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_learn_page_moves_through_training(lang):
    with no_pages_dir_mode(), harness_language(lang):
        at = open_app("learn", lang=lang)
        assert not at.exception and not at.error
        assert figure(at, "learn_loss")["layout"]["shapes"][0]["x0"] == at.select_slider(key="learn_step_v").value
        assert len(figure(at, "learn_ind")["data"]) == 8  # 2 layers × 4 heads
        each, mean = (tr["line"]["color"] for tr in figure(at, "learn_loss")["data"])
        assert each != mean  # the raw loss and its running mean told apart (both were light blues)
        steps = load_steps(FOLDER)["steps"]
        at.select_slider(key="learn_step_v").set_value(steps[-1]).run()
        assert not at.exception
        heat = figure(at, "learn_heat")
        assert "layer 1" in heat["layout"]["title"]["text"] or "第 1 层" in heat["layout"]["title"]["text"]
        at.text_input(key="learn_text").input("<script>alert(1)</script> 😀").run()
        assert not at.exception
        label = at.text_input(key="learn_text").label  # the alphabet the model knows: a–p, it said a–z
        assert "a–p" in label and "z" not in label
        at.text_input(key="learn_text").input("小 明 小 明").run()
        assert "'小', '明'" in at.warning[0].value or "'小', '明'" in at.error[0].value
        for empty in ("", "   "):  # this box is empty, not the sidebar's text (the message said "in the sidebar")
            at.text_input(key="learn_text").input(empty).run()
            assert not at.exception and not at.error
            assert [w.value for w in at.warning] == [strings()["learn_text_empty"][lang].format(
                first="a", last="p", example="d a c b g f d a c b g f")], [w.value for w in at.warning]


def test_learn_page_states_the_phases_it_reads_off_the_curves(data):
    found = phases(data)
    with no_pages_dir_mode():
        at = open_app("learn")
    text = next(m.value for m in at.markdown if m.value.startswith("**What the curves show:**"))
    assert f"step **{found['steepest_drop']}**" in text and f"step **{found['induction_half']}**" in text
    assert f"**{found['icl_final']:.2f}**" in text


def test_the_default_view_is_the_best_induction_head_once_formed_and_its_map_shows_the_stripe(data):
    """Before: the page opened on step 78, layer 1 head 3, whose map was a column on one key, under a caption
    describing the induction stripe. It opens on the last layer's best head (highest final induction score) at the
    first snapshot where that head reached 90% of it, and the stripe the caption names is on that map: each
    second-copy row's weight on the letter after its earlier occurrence, recomputed here."""
    from harness.apptest import EN
    from transformer_core import trace_text
    from transformer_core.train.snapshots import default_view

    step, layer, head = default_view(data)
    final = data["measures"][str(data["steps"][-1])]["induction"]
    assert (layer, head) == (len(final) - 1, int(np.argmax(final[-1])))
    with no_pages_dir_mode(), harness_language("zh"):
        at = open_app("learn", lang="zh")
    assert not at.exception
    assert (at.select_slider(key="learn_step_v").value, at.selectbox(key="learn_layer").value,
            at.selectbox(key="learn_head").value) == (step, layer, head)
    text = at.text_input(key="learn_text").value
    heat = figure(at, "learn_heat")
    base = catalog.load("shipped:induction-steps", "cpu")[0]

    def stripe(at_step: int) -> tuple[float, float]:
        _, trace = trace_text(load_snapshot(base, FOLDER, at_step), text)
        w = trace.attention("dec_self", layer).weights[0, head]  # (T, T)
        L = w.size(0) // 2
        q, k = L + torch.arange(L), torch.arange(1, L + 1)  # the 2nd copy's rows -> the letter after the 1st copy
        return float(w[q, k].mean()), float((w[q].argmax(-1) == k).float().mean())

    shown = np.nan_to_num(array(heat["data"][0]["z"]))
    _, trace = trace_text(load_snapshot(base, FOLDER, step), text)
    assert np.allclose(shown, trace.attention("dec_self", layer).weights[0, head].numpy(), atol=1e-3)
    mean, rows = stripe(step)
    assert mean > 0.5 and rows >= 0.8, (mean, rows)  # the stripe below the diagonal, in (nearly) every row
    before, _ = stripe(data["steps"][0])
    assert before < 0.3  # "move the slider back ... the stripe is not there"
    assert "diagonal" in EN["learn_heat_hint"] and "parallel" in EN["learn_heat_hint"]


def test_layer_0_induction_is_greyed_and_what_its_score_is_made_of_is_measured(data):
    """A layer-0 head cannot do induction; its score (about 0.3 around steps 40-100) is looking a few tokens back
    plus avoiding its own token. The caption's numbers are recomputed here through forward hooks."""
    from harness.apptest import EN
    from transformer_core.analysis.heads import unrepeated_batch

    step = data["steps"][7]  # step 42: layer-0 scores near 0.3
    with no_pages_dir_mode():
        at = open_app("learn", lang="en")
        at.select_slider(key="learn_step_v").set_value(step).run()
    assert not at.exception
    ind = figure(at, "learn_ind")["data"]
    assert {tr["line"].get("color") for tr in ind[:4]} == {"#9e9e9e"} and all("color" not in tr["line"]
                                                                               for tr in ind[4:])
    model = load_snapshot(catalog.load("shipped:induction-steps", "cpu")[0], FOLDER, step)
    L = default_length(model)
    probe, plain = (weights_by_hooks(model, b(vocab_ids(model), L, 16, 0))[0][0] for b in (induction_batch,
                                                                                          unrepeated_batch))
    q = L + torch.arange(L - 1)
    cells = {name: w[:, :, q, q - L + d].mean((0, 2)) for name, w, d in (
        ("score", probe, 1), ("control", plain, 1), ("own", probe, 0), ("own_control", plain, 0))}
    head = int(np.argmax(data["measures"][str(step)]["induction"][0]))
    assert float(cells["score"][head]) == pytest.approx(data["measures"][str(step)]["induction"][0][head], abs=2e-3)
    note = EN["learn_ind_l0"].format(step=step, head=head, off=L - 1,
                                     **{k: float(v[head]) for k, v in cells.items()})
    assert note in [c.value for c in at.caption]
    assert cells["own"][head] < cells["own_control"][head]  # it avoids its own token
    assert cells["control"][head] > 1.5 / (2 * L)  # and looks a few tokens back more than a uniform head would
    assert "no induction in layer 0" in EN["learn_heat_title_l0"]


def test_at_the_first_step_layer_0_is_said_to_have_learned_nothing_yet(data):
    """At step 1 the note called a layer-0 head's 0.18 "two things a layer-0 head can do" (looking back, avoiding its
    own token), yet it is what attention spread evenly gets: the untrained head does neither. Recomputed here."""
    from harness.apptest import EN
    from transformer_core.analysis.heads import unrepeated_batch

    step = data["steps"][0]
    with no_pages_dir_mode():
        at = open_app("learn", lang="en")
        at.select_slider(key="learn_step_v").set_value(step).run()
    assert not at.exception
    model = load_snapshot(catalog.load("shipped:induction-steps", "cpu")[0], FOLDER, step)
    L = default_length(model)
    even = float(np.mean([1 / (L + j + 1) for j in range(L - 1)]))  # query L + j shares its weight among L + j + 1
    plain = weights_by_hooks(model, unrepeated_batch(vocab_ids(model), L, 16, 0))[0][0]
    q = L + torch.arange(L - 1)
    head = int(np.argmax(data["measures"][str(step)]["induction"][0]))
    score = data["measures"][str(step)]["induction"][0][head]
    control = float(plain[:, :, q, q - L + 1].mean((0, 2))[head])
    assert abs(score - even) < 0.03 and abs(control - even) < 0.03
    note = EN["learn_ind_l0_even"].format(step=step, head=head, score=score, even=even, control=control)
    assert note in [c.value for c in at.caption]
    assert not [c for c in at.caption if c.value.startswith(EN["learn_ind_l0"][:40]) and "two things" in c.value]
