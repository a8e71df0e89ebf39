"""Save and load weights as state_dict (.pt) + JSON config; loading never unpickles code."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from .config import ConfigError, TransformerConfig
from .model import Transformer, build_model

MAX_CHECKPOINT_BYTES = 200 * 1024 * 1024


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded; the message says why."""


def save_checkpoint(model: Transformer, path: str | Path, meta: dict | None = None) -> tuple[Path, Path]:
    """Write PATH.pt (state_dict) and PATH.json ({"config": ..., "meta": ...})."""
    path = Path(path).with_suffix("")
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    torch.save(state, path.with_suffix(".pt"))
    doc = {"config": json.loads(model.cfg.to_json()), "meta": meta or {}}
    path.with_suffix(".json").write_text(json.dumps(doc, indent=2, ensure_ascii=False), encoding="utf-8")
    return path.with_suffix(".pt"), path.with_suffix(".json")


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """torch.load with weights_only=True: a file with pickled code is refused, never run."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint file at {path}")
    if path.stat().st_size > MAX_CHECKPOINT_BYTES:
        raise CheckpointError(f"{path.name} is larger than {MAX_CHECKPOINT_BYTES // 2**20} MB")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # UnpicklingError for code, RuntimeError for corrupt files
        raise CheckpointError(
            f"{path.name} is not a plain tensor checkpoint and was refused without running it ({type(exc).__name__})"
        ) from exc
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path.name} does not hold a state_dict of tensors")
    return state


def load_state_into(model: Transformer, state: dict[str, torch.Tensor]) -> Transformer:
    """Copy a state_dict in, refusing missing, unexpected or mis-shaped tensors with a clear error."""
    own = model.state_dict()
    problems = [f"missing {k}" for k in own if k not in state]
    problems += [f"unexpected {k}" for k in state if k not in own]
    problems += [
        f"{k}: file has {tuple(state[k].shape)}, config needs {tuple(v.shape)}"
        for k, v in own.items() if k in state and state[k].shape != v.shape
    ]
    if problems:
        raise CheckpointError("the weights do not match the config: " + "; ".join(problems[:6])
                              + (f" (and {len(problems) - 6} more)" if len(problems) > 6 else ""))
    model.load_state_dict(state)
    return model


def read_config(path: str | Path) -> tuple[TransformerConfig, dict]:
    """The config and meta of PATH.json."""
    path = Path(path).with_suffix(".json")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return TransformerConfig.from_dict(doc["config"]), doc.get("meta", {})
    except (OSError, ValueError, KeyError, TypeError, ConfigError) as exc:
        raise CheckpointError(f"cannot read the config {path.name}: {exc}") from exc


def load_checkpoint(path: str | Path, device=None) -> tuple[Transformer, dict]:
    """Build the model from PATH.json and load PATH.pt into it; returns (model in eval mode, meta)."""
    cfg, meta = read_config(path)
    model = build_model(cfg, "cpu")
    load_state_into(model, read_state_dict(Path(path).with_suffix(".pt")))
    return model.to(device or next(model.parameters()).device).eval(), meta
