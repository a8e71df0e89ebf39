"""Every setting of the server, from environment variables: the only module that reads them.

Each setting has a default, a validation, and a line in the README's settings table (a test checks both).
A bad value falls back to the default and is reported once in the server log, never a crash.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path

from transformer_core.sources import ROOT, Places

log = logging.getLogger(__name__)
ADMIN_TOKEN_MIN = 16  # a shorter admin token could be guessed


@dataclass(frozen=True)
class Setting:
    env: str
    default: object
    help: str
    lo: float | None = None  # numbers: allowed range
    hi: float | None = None


SETTINGS: dict[str, Setting] = {
    "device": Setting("TRANSFORMER_EXPLORER_DEVICE", "auto", "auto (CUDA when available), cpu, cuda or cuda:N"),
    "checkpoints_dir": Setting("TRANSFORMER_EXPLORER_CHECKPOINTS", str(ROOT / "checkpoints"),
                               "folder where models trained or uploaded in the app are saved"),
    "models_dir": Setting("TRANSFORMER_EXPLORER_MODELS_DIR", "",
                          "folder of GPT-2 weight files the app may open by name (empty: none)"),
    "gpt2_weights": Setting("GPT2_WEIGHTS", "", "GPT-2 small weights file you already have (model.safetensors)"),
    "max_trainings": Setting("TRANSFORMER_EXPLORER_MAX_TRAININGS", 2, "trainings running at once on the server",
                             1, 64),
    "max_train_seconds": Setting("TRANSFORMER_EXPLORER_MAX_TRAIN_SECONDS", 1800, "a training is stopped after this",
                                 1, 86_400),
    "abandon_seconds": Setting("TRANSFORMER_EXPLORER_ABANDON_SECONDS", 45,
                               "a training whose tab sent no sign of life for this long is stopped, unsaved (an open "
                               "tab sends one every 10 s)", 20, 3600),
    "max_train_params": Setting("TRANSFORMER_EXPLORER_MAX_TRAIN_PARAMS", 50_000_000,
                                "largest model a training may build", 1_000, 2_000_000_000),
    "train_threads": Setting("TRANSFORMER_EXPLORER_TRAIN_THREADS", 1, "CPU threads of one training", 1, 256),
    "page_threads": Setting("TRANSFORMER_EXPLORER_PAGE_THREADS", 1,
                            "CPU threads of one page's tensor work (many learners' pages run at once)", 1, 256),
    "page_runs": Setting("TRANSFORMER_EXPLORER_PAGE_RUNS", 2,
                         "learners' pages computed at once; the others wait their turn (0: no limit)", 0, 256),
    "model_cache_mb": Setting("TRANSFORMER_EXPLORER_MODEL_CACHE_MB", 1536,
                              "memory for models kept loaded, shared by all sessions (MB)", 16, 1_000_000),
    "trace_cache_mb": Setting("TRANSFORMER_EXPLORER_TRACE_CACHE_MB", 2048, "memory for cached traces (MB)",
                              16, 1_000_000),
    "memory_budget_mb": Setting("TRANSFORMER_EXPLORER_MEMORY_BUDGET_MB", 3072,
                                "memory for work in flight: traces being computed, trainings, uploads (MB)",
                                64, 1_000_000),
    "checkpoints_max_mb": Setting("TRANSFORMER_EXPLORER_CHECKPOINTS_MAX_MB", 4096,
                                  "disk the checkpoints folder may fill with models trained or uploaded here (MB)",
                                  16, 10_000_000),
    "admin_token": Setting("TRANSFORMER_EXPLORER_ADMIN_TOKEN", "",
                           f"the instructor's secret for publishing a model to everyone (at least {ADMIN_TOKEN_MIN} "
                           "characters; empty: publishing is off)"),
    "tiktoken_cache_dir": Setting("TIKTOKEN_CACHE_DIR", "", "tiktoken's cache, for encodings not shipped in assets/"),
    "hf_offline": Setting("HF_HUB_OFFLINE", False, "1: never download GPT-2, use the Hugging Face cache only"),
}


def _parse(name: str, raw: str | None) -> object:
    spec = SETTINGS[name]
    if raw is None or raw.strip() == "":
        return spec.default
    raw = raw.strip()
    try:
        if isinstance(spec.default, bool):
            return raw.lower() in ("1", "true", "yes", "on")
        if isinstance(spec.default, int):
            value = int(raw)
            if (spec.lo is not None and value < spec.lo) or (spec.hi is not None and value > spec.hi):
                raise ValueError("out of range")
            return value
        if name == "admin_token" and len(raw) < ADMIN_TOKEN_MIN:
            log.warning("setting %s is shorter than %d characters; publishing is off", spec.env, ADMIN_TOKEN_MIN)
            return spec.default  # never log the value: it is a secret
        if name == "device" and not (raw in ("auto", "cpu", "cuda") or raw.startswith("cuda:")):
            raise ValueError("unknown device")
        return raw
    except ValueError:
        log.warning("setting %s=%r is not valid (%s); using the default %r", spec.env, raw[:40], spec.help,
                    spec.default)
        return spec.default


@dataclass(frozen=True)
class Settings:
    device: str
    checkpoints_dir: str
    models_dir: str
    gpt2_weights: str
    max_trainings: int
    max_train_seconds: int
    abandon_seconds: int
    max_train_params: int
    train_threads: int
    page_threads: int
    page_runs: int
    model_cache_mb: int
    trace_cache_mb: int
    memory_budget_mb: int
    checkpoints_max_mb: int
    admin_token: str = field(repr=False)  # a secret: never in a log line
    tiktoken_cache_dir: str
    hf_offline: bool

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        return cls(**{f.name: _parse(f.name, env.get(SETTINGS[f.name].env)) for f in fields(cls)})

    @property
    def places(self) -> Places:
        """Where the model sources look."""
        return Places(user_dir=Path(self.checkpoints_dir),
                      gpt2_weights=Path(self.gpt2_weights).expanduser() if self.gpt2_weights else None,
                      models_dir=Path(self.models_dir).expanduser() if self.models_dir else None,
                      hf_offline=self.hf_offline)


@lru_cache(maxsize=1)
def settings() -> Settings:
    """The server's settings, read once per process."""
    return Settings.from_env()
