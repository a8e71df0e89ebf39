"""One error type for everything a learner (or a notebook) can get wrong: a stable code plus parameters.

The app shows the code's message in the learner's language (`assets/strings/errors.json`, key "err.<code>");
`str(error)` is the English text of the same entry, so a notebook reads the same sentence. No code ever
matches on message text.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

STRINGS = Path(__file__).resolve().parents[1] / "assets" / "strings" / "errors.json"


@lru_cache(maxsize=1)
def _messages() -> dict[str, dict[str, str]]:
    return json.loads(STRINGS.read_text(encoding="utf-8"))


class _Keep(dict):
    """format_map helper: a parameter a message does not get stays visible as {name}."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


class Reason(str):
    """Why something failed, in the user's words: a key of errors.json's "reason.*" entries, shown translated.
    Never an exception's class name (a learner cannot act on "UnpicklingError")."""


# The first matching row wins: (words in the exception's module or class name, reason). Matched by name so this
# module imports nothing heavy (safetensors, requests, urllib3 raise their own classes).
_REASONS = (
    (("timeout", "timedout"), "timeout"),
    (("requests", "urllib", "http", "connection", "socket", "gaierror", "ssl"), "network"),
    (("memoryerror", "overflowerror", "toolarge"), "too_large"),
    (("unpickl", "safetensor", "badzip", "eoferror", "zlib", "headertoo", "jsondecode", "unicodedecode"), "damaged"),
    (("valueerror", "keyerror", "typeerror", "indexerror", "attributeerror"), "format"),
    (("permission", "filenotfound", "isadirectory", "notadirectory", "oserror"), "file"),
)


def reason_of(exc: BaseException) -> Reason:
    """The cause of an exception as a Reason (network, timeout, too large, damaged, wrong format, file, unknown)."""
    for cls in type(exc).__mro__:
        name = f"{cls.__module__}.{cls.__name__}".lower()
        for words, reason in _REASONS:
            if any(w in name for w in words):
                return Reason(reason)
    return Reason("unknown")


def message(code: str, lang: str = "en", **params) -> str:
    """The text of an error code in a language (English when the language lacks it), filled with params
    (a Reason parameter is itself translated)."""
    # a count of one has its own sentence where the language needs one ("1 token", not "1 tokens")
    entry = (params.get("n") == 1 and _messages().get(f"err.{code}_one")) or _messages().get(f"err.{code}") \
        or _messages()["err.unexpected"]
    for key, value in params.items():
        if isinstance(value, Reason):
            words = _messages().get(f"reason.{value}") or _messages()["reason.unknown"]
            params[key] = words.get(lang) or words["en"]
    return (entry.get(lang) or entry["en"]).format_map(_Keep(params))


def known_codes() -> set[str]:
    return {k.removeprefix("err.") for k in _messages() if k.startswith("err.")}


class ExplorerError(Exception):
    """Base of every error the project raises on purpose: `code` names the message, `params` fill it."""

    code = "unexpected"

    def __init__(self, code: str | None = None, **params) -> None:
        self.code = code or type(self).code
        self.params = params
        super().__init__(self.code)

    def __str__(self) -> str:
        return message(self.code, "en", **self.params)

    def text(self, lang: str = "en") -> str:
        return message(self.code, lang, **self.params)


# Families a caller may want to catch; each is also the ValueError / RuntimeError it used to be.
class InputError(ExplorerError, ValueError):
    """User input the model cannot take."""


class ConfigError(ExplorerError, ValueError):
    """A config that cannot build a model."""


class EncodingUnavailable(ExplorerError, RuntimeError):
    """A tokenizer encoding that cannot be loaded."""


class DeviceError(ExplorerError, ValueError):
    """A device that is unknown or not available here."""


class SamplingError(ExplorerError, ValueError):
    """Impossible sampling settings."""


class CheckpointError(ExplorerError, ValueError):
    """A weights or config file that cannot be used (nothing in it was run)."""


class TrainingError(ExplorerError, ValueError):
    """Training settings or data that cannot work."""


class TaskError(ExplorerError, ValueError):
    """Text a synthetic-task model cannot take."""


class ModelSourceError(ExplorerError, ValueError):
    """A model that cannot be found or loaded from where it should come from."""
