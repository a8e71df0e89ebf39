"""Model-card fields measured on a trained model (a task's accuracy and alignment, a text model's accuracy)."""
from __future__ import annotations

import torch

from ..analysis.alignment import alignment_mass
from .loop import TrainResult, describe
from .tasks import TASKS, SeqToSeqTask

ACCURACY_N, ACCURACY_SEED = 512, 99


def task_card(name: str, result: TrainResult, n: int = ACCURACY_N) -> dict:
    """A task model's card: descriptions, examples, accuracy on fresh examples, cross-attention alignment."""
    task = TASKS[name]
    card = {
        "task": name, "arch": task.arch, "description": {"en": task.description, "zh": task.description_zh},
        "example_src": task.example.src, "example_tgt": task.example.tgt,
        "accuracy": round(task.accuracy(result.model, n=n, seed=ACCURACY_SEED), 4),
        "accuracy_metric": task.metric, "accuracy_examples": n, "accuracy_seed": ACCURACY_SEED,
    }
    if isinstance(task, SeqToSeqTask):
        card["cross_attention_alignment"] = alignment_mass(result.model, task)  # per decoder layer
    return card | run_fields(result)


def run_fields(result: TrainResult) -> dict:
    """What every card says about its run."""
    return {"steps": result.iterations, "tokens_seen": result.tokens, "train_seconds": round(result.seconds, 1),
            "device": str(result.device), "stopped": result.stopped, "train_config": describe(result.config)}


@torch.no_grad()
def next_token_accuracy(model, data: torch.Tensor, context: int) -> float:
    """Argmax next-token accuracy over consecutive windows of a split."""
    starts = range(0, len(data) - context, context)
    x = torch.stack([data[i : i + context] for i in starts])  # (N, T)
    y = torch.stack([data[i + 1 : i + context + 1] for i in starts])  # (N, T)
    return float((model(x.to(next(model.parameters()).device)).argmax(-1).cpu() == y).float().mean())
