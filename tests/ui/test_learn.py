"""Watch a model learn: the shipped snapshots, every curve's numbers recomputed here from the snapshot weights through
an independent path (plain PyTorch forward hooks on the attention modules), and the page in both languages."""
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.apptest import figure, harness_language, no_pages_dir_mode, open_app
from service import catalog
from transformer_core.analysis.heads import default_length, induction_batch, vocab_ids
from transformer_core.train.snapshots import N_SNAPSHOTS, load_snapshot, load_steps, phases

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


def test_learn_page_states_the_phases_it_reads_off_the_curves(data):
    found = phases(data)
    with no_pages_dir_mode():
        at = open_app("learn")
    text = next(m.value for m in at.markdown if m.value.startswith("**What the curves show:**"))
    assert f"step **{found['steepest_drop']}**" in text and f"step **{found['induction_half']}**" in text
    assert f"**{found['icl_final']:.2f}**" in text
