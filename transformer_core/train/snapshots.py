"""A model trained with snapshots of its weights along the way, to watch an induction head form: the repeat task
(a random span of letters written twice), where copying the second half needs a previous-token head in layer 0
feeding an induction head in layer 1. Snapshots are dense early (the change is fast) and sparse later; at each one
the build measures every head's previous-token and induction score and the in-context-learning score, and a test
recomputes them from the shipped snapshot weights.

In-context learning score (as in Olsson et al., 2022): the mean loss on the second copy of a repeated random
sequence minus the mean loss on the first copy; it falls below zero once the model copies from context.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..analysis.blocks import block_weights
from ..analysis.heads import default_length, induction, induction_batch, previous_token, vocab_ids
from ..model.transformer import Transformer
from .defaults import SHIPPED_TASKS

SNAPSHOTS_FILE, STEPS_FILE = "snapshots.safetensors", "steps.json"
# the shipped repeat recipe, stopped earlier (the circuit forms in the first few hundred steps)
RECIPE = replace(SHIPPED_TASKS["repeat"], max_iters=1000)
N_SNAPSHOTS = 40
PROBE_SEED = 0


def schedule(max_iters: int, n: int = N_SNAPSHOTS) -> list[int]:
    """n steps from 1 to max_iters, evenly spaced on a square-root scale: dense early, where the change is fast."""
    raw = np.linspace(1, np.sqrt(max_iters), n) ** 2
    return sorted({int(round(x)) for x in raw} | {max_iters})


@torch.inference_mode()
def measure(model: Transformer, count: int = 16) -> dict:
    """Every head's previous-token and induction score on the probe (random spans written twice, as the Heads page
    uses), and the in-context-learning score on the same sequences."""
    length = default_length(model)
    seqs = induction_batch(vocab_ids(model), length, count, PROBE_SEED)  # (count, 2L)
    weights = block_weights(model, seqs, None)
    prev = {layer: previous_token(w).tolist() for (_, layer), w in weights.items()}
    ind = {layer: induction(w, length).tolist() for (_, layer), w in weights.items()}
    logits = model(seqs)  # (count, 2L, vocab)
    nats = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), seqs[:, 1:].flatten(), reduction="none")
    nats = nats.view(count, -1)  # (count, 2L - 1): position t predicts token t + 1
    first, second = nats[:, : length - 1].mean(), nats[:, length:].mean()  # inside copy 1; the copy-2 tokens
    return {"previous_token": [prev[layer] for layer in sorted(prev)],
            "induction": [ind[layer] for layer in sorted(ind)],
            "loss_first": float(first), "loss_second": float(second), "icl": float(second - first)}


def save_snapshots(folder: Path, states: dict[int, dict], history: list[float], measures: dict[int, dict]) -> None:
    from safetensors.torch import save_file

    flat = {f"{step}/{name}": t.contiguous() for step, state in states.items() for name, t in state.items()}
    save_file(flat, str(folder / SNAPSHOTS_FILE))
    (folder / STEPS_FILE).write_text(json.dumps({
        "steps": sorted(states), "loss": [round(x, 4) for x in history],
        "measures": {str(k): v for k, v in sorted(measures.items())}}, indent=1), encoding="utf-8")


def load_steps(folder: Path) -> dict | None:
    path = Path(folder) / STEPS_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def load_snapshot(model: Transformer, folder: Path, step: int) -> Transformer:
    """A copy of `model` holding the weights of snapshot `step` (the shared model is never changed)."""
    import copy

    from safetensors import safe_open

    out = copy.deepcopy(model)
    with safe_open(str(Path(folder) / SNAPSHOTS_FILE), framework="pt") as f:
        state = {k.split("/", 1)[1]: f.get_tensor(k).float() for k in f.keys()  # noqa: SIM118
                 if k.startswith(f"{step}/")}
    if not state:
        raise KeyError(step)
    out.load_state_dict(state, strict=False)
    return out.eval()


FORMED = 0.9  # the default view opens where the best induction head has reached this share of its final score


def default_view(data: dict, share: float = FORMED) -> tuple[int, int, int]:
    """(step, layer, head) the Learn page opens on: the last layer's head with the best final induction score, at
    the first snapshot where that head has reached `share` of it (the stripe is there; move back to see it form)."""
    steps = data["steps"]
    last = data["measures"][str(steps[-1])]["induction"]
    layer = len(last) - 1
    head = int(np.argmax(last[layer]))
    final = last[layer][head]
    step = next(s for s in steps if data["measures"][str(s)]["induction"][layer][head] >= share * final)
    return step, layer, head


def phases(data: dict, smooth: int = 25) -> dict:
    """What the curves show, read off them: the step where the training loss falls fastest after its first fall
    from the random start (the phase change; the first `2 · smooth` steps are left out), and
    the first snapshot where the best previous-token head (layer 0) and the best induction head (last layer) get
    halfway from their first score to their final one (which formed first)."""
    loss = np.convolve(np.asarray(data["loss"], dtype=float), np.ones(smooth) / smooth, mode="valid")
    skip = 2 * smooth
    drop = int(np.argmin(np.diff(loss)[skip:])) + skip + smooth  # the step ending the steepest smoothed fall
    steps = data["steps"]
    m = [data["measures"][str(s)] for s in steps]
    prev = np.array([max(x["previous_token"][0]) for x in m])
    ind = np.array([max(x["induction"][-1]) for x in m])

    def halfway(series: np.ndarray) -> int:
        start, end = series[0], series[-1]
        return steps[int(np.argmax(series >= start + (end - start) / 2))]

    return {"steepest_drop": drop, "prev_half": halfway(prev), "induction_half": halfway(ind),
            "prev_final": float(prev[-1]), "induction_final": float(ind[-1]), "icl_final": m[-1]["icl"],
            "icl_first": m[0]["icl"]}
