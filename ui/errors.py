"""Turn any error into a message in the learner's language: an ExplorerError by its code, anything else as a
neutral sentence (the details go to the server log, never to the page)."""
from __future__ import annotations

import logging

import streamlit as st

from transformer_core.errors import (
    CheckpointError,
    ConfigError,
    EncodingUnavailable,
    ExplorerError,
    InputError,
    ModelSourceError,
    SamplingError,
    TaskError,
    TrainingError,
)

from .i18n import lang, t

log = logging.getLogger(__name__)
# (kind of box, icon) per family; input the learner can fix is a warning, the rest an error
STYLE = [(InputError, "warning", "✍️"), (TaskError, "warning", "🔤"), (SamplingError, "warning", "🎛️"),
         (EncodingUnavailable, "error", "🔌"), (ConfigError, "error", "⚙️"), (TrainingError, "error", "⚙️"),
         (CheckpointError, "error", "🛡️"), (ModelSourceError, "error", "📦")]


def error_text(exc: BaseException) -> str:
    """The learner's sentence for an error."""
    if isinstance(exc, ExplorerError):
        return exc.text(lang())
    log.exception("unexpected error", exc_info=exc)
    return t("err.unexpected")


def show_error(exc: BaseException) -> None:
    """A clear message box for an error; never a traceback."""
    kind, icon = next(((k, i) for cls, k, i in STYLE if isinstance(exc, cls)), ("warning" if isinstance(
        exc, ExplorerError) else "error", "⚠️"))
    getattr(st, kind)(error_text(exc), icon=icon)
