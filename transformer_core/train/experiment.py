"""The course's "does positional information help?": the same run with and without positional encoding."""
from __future__ import annotations

from dataclasses import dataclass, replace

from .defaults import EXPERIMENT
from .loop import History, TrainConfig, train
from .tasks import TASKS

RUNS = ("sinusoidal", "none")  # positional encoding on, off


def experiment_runs(task: str = "reverse", **changes) -> dict[str, TrainConfig]:
    """Run label -> config: the experiment's settings with positions on and off."""
    base = replace(EXPERIMENT, task=task, **changes)
    return {p: replace(base, positional=p) for p in RUNS}


@dataclass
class PositionalExperiment:
    task: str
    histories: dict[str, History]  # "sinusoidal" / "none" -> loss curves
    accuracy: dict[str, float]  # on fresh examples
    stopped: bool = False


def positional_experiment(task: str = "reverse", callback=None, stop=None, **changes) -> PositionalExperiment:
    """Train both runs one after the other (the callback sees both) and measure each on fresh examples."""
    exp = PositionalExperiment(task, {}, {})
    for label, tc in experiment_runs(task, **changes).items():
        result = train(tc, callback, stop)
        exp.histories[label] = result.history
        exp.accuracy[label] = TASKS[task].accuracy(result.model, n=128)
        exp.stopped |= result.stopped
    return exp
