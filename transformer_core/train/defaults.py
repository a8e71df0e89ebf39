"""Training defaults, in one place: the Train page's starting settings, the positional experiment, and the
shipped task models all derive from these."""
from __future__ import annotations

from dataclasses import replace

from .loop import TrainConfig

# The course's small GPT (doc 003): TrainConfig's own defaults (batch 4, context 16, d_model 64, 8 layers, 4 heads).
COURSE_GPT = TrainConfig()
# A task learns in a minute or two on a 2-core CPU with these.
QUICK_TASK = TrainConfig(batch_size=32, d_model=64, n_layers=2, n_heads=4, dropout=0.0, lr=3e-3, eval_interval=50,
                         eval_iters=4, lr_schedule="cosine", seed=0)
QUICK_ITERS = {"copy": 300, "reverse": 400, "sort": 800, "repeat": 600, "count": 600, "dates": 800}
# The course's "does position help?" on a task: small and quick (about 10 s per run on a CPU).
EXPERIMENT = replace(QUICK_TASK, lr=1e-3, lr_schedule="constant", max_iters=600)
EXPERIMENT_TASKS = ("reverse", "copy")  # order-sensitive: without positions the encoder cannot tell first from last
# The shipped task models: wider and longer than the quick ones (sharper maps), on the CPU for reproducibility.
SHIPPED_TASK = replace(QUICK_TASK, batch_size=64, eval_interval=100, device="cpu")
SHIPPED_SEQ2SEQ = replace(SHIPPED_TASK, d_model=128, d_ffn=512)
SHIPPED_TASKS = {
    "copy": replace(SHIPPED_SEQ2SEQ, task="copy", max_iters=600),
    "reverse": replace(SHIPPED_SEQ2SEQ, task="reverse", max_iters=1500),
    "sort": replace(SHIPPED_SEQ2SEQ, task="sort", max_iters=2000),
    "repeat": replace(SHIPPED_TASK, task="repeat", max_iters=1500),
    "count": replace(SHIPPED_TASK, task="count", max_iters=1000),
}


def quick(target: str) -> TrainConfig:
    """The Train page's starting settings: a task's (small, quick) or, for "text", the course GPT's."""
    if target == "text":
        return COURSE_GPT
    return replace(QUICK_TASK, task=target, max_iters=QUICK_ITERS.get(target, 500))
