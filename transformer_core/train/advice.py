"""What a text model's curves say to do next (its card's advice): text only validation holds, overfitting, or a
loss still falling. Each item is a message code with the figures it cites, read from the run's own evaluations."""
from __future__ import annotations

from .loop import History

UNK_SHARE = 0.05  # a validation split with more ⟨unk⟩ than this holds text the training split never shows
RISE = 0.1  # nats: validation loss this far above its lowest while training loss fell below its own then: overfitting
STILL_FALLING = 0.02  # nats: the last evaluation this far below the one before it: the curve still goes down


def curve_advice(history: History, val_unk: tuple[int, int] | None = None, unknown: tuple[str, ...] = (),
                 best_step: int | None = None) -> list[dict]:
    """The advice items of a run, each {"code": ..., figures}.

    "unk": `val_unk` = (⟨unk⟩ tokens, validation tokens) has more than UNK_SHARE ⟨unk⟩ (`unknown`: words they spell);
    "overfit": validation loss rose RISE above its lowest while training loss fell ("kept": the step whose weights
    the model holds); "longer": validation loss still falling at the last evaluation.
    """
    out = []
    if val_unk is not None and val_unk[0] > UNK_SHARE * val_unk[1]:
        out.append({"code": "unk", "n_unk": val_unk[0], "n_val": val_unk[1], "share": val_unk[0] / val_unk[1],
                    "examples": list(unknown)})
    val, train, steps = history.val_loss, history.train_loss, history.eval_steps
    if len(val) < 2:
        return out
    low = min(range(len(val)), key=val.__getitem__)
    if val[-1] - val[low] > RISE and train[-1] < train[low]:
        out.append({"code": "overfit", "low_step": steps[low], "low_val": val[low], "last_step": steps[-1],
                    "last_val": val[-1], "low_train": train[low], "last_train": train[-1], "kept": best_step})
    elif val[-2] - val[-1] > STILL_FALLING:
        out.append({"code": "longer", "prev_step": steps[-2], "prev_val": val[-2], "last_step": steps[-1],
                    "last_val": val[-1]})
    return out
