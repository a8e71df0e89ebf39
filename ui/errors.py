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
    message,
)

from .i18n import lang, strings, t

log = logging.getLogger(__name__)
# (kind of box, icon) per family; input the learner can fix is a warning, the rest an error
STYLE = [(InputError, "warning", "✍️"), (TaskError, "warning", "🔤"), (SamplingError, "warning", "🎛️"),
         (EncodingUnavailable, "error", "🔌"), (ConfigError, "error", "⚙️"), (TrainingError, "error", "⚙️"),
         (CheckpointError, "error", "🛡️"), (ModelSourceError, "error", "📦")]


def error_text(exc: BaseException) -> str:
    """The learner's sentence for an error."""
    if isinstance(exc, ExplorerError):
        field = exc.params.get("field")
        if exc.code == "train_range" and f"tr_{field}" in strings():  # a setting named as its box on the Train page
            return message(exc.code, lang(), **{**exc.params, "field": t(f"tr_{field}")})
        return exc.text(lang())
    log.exception("unexpected error", exc_info=exc)
    return t("err.unexpected")


def show_error(exc: BaseException) -> None:
    """A clear message box for an error; never a traceback."""
    kind, icon = next(((k, i) for cls, k, i in STYLE if isinstance(exc, cls)), ("warning" if isinstance(
        exc, ExplorerError) else "error", "⚠️"))
    getattr(st, kind)(error_text(exc), icon=icon)
