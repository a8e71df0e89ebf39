"""The model catalog: which models the app lists to whom, which one it opens on, and loading one by key.

Private by default: a model trained or uploaded here carries its owner in its card, as a hash of the browser's
random token (owner_id; never the token itself), and only that viewer sees or opens it. Everyone sees the shipped
models, the presets, GPT-2, published models, and model folders an instructor copied in by hand (no owner).
A key that names a model the viewer may not see is refused with the same message as a missing one. An instructor
with the admin token (TRANSFORMER_EXPLORER_ADMIN_TOKEN) publishes a model to everyone.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
import time
import unicodedata
from pathlib import Path

from transformer_core.errors import ExplorerError, ModelSourceError
from transformer_core.sources import ModelEntry, list_entries, load_model
from transformer_core.sources import load_bytes as sources_load_bytes
from transformer_core.sources.folders import REF, folder_card
from transformer_core.sources.presets import preset_key
from transformer_core.train.checkpoint import CARD, WEIGHTS, write_card

from . import budget
from .settings import settings

LIST_TTL_S = 2.0  # the sidebar lists models on every rerun: read the folders at most this often
NAME_CHARS = 40
MARKUP = set("`*[]<>\\|$~#{}")  # markdown, HTML and LaTeX a label must not smuggle into a page
_lock = threading.Lock()
_listed: tuple[float, list[ModelEntry]] = (0.0, [])


class PublishError(ExplorerError, PermissionError):
    """Publishing refused (no admin token set, or a wrong one)."""

    code = "publish_denied"


def new_token() -> str:
    """A fresh random viewer token (the UI keeps it for the browser, e.g. in its URL or local storage)."""
    return secrets.token_urlsafe(24)


def owner_id(token: str | None) -> str | None:
    """What a card stores as its owner: a hash of the viewer's token (None for no token). Tokens come from
    new_token(): a short one chosen by hand only makes its own models guessable."""
    if not isinstance(token, str) or not token:
        return None
    return hashlib.sha256(f"transformer-explorer-owner:{token}".encode()).hexdigest()[:40]


def _all() -> list[ModelEntry]:
    """Every model on the server, for everyone (re-read from disk at most every LIST_TTL_S seconds)."""
    global _listed
    with _lock:
        stamp, listed = _listed
        if time.monotonic() - stamp > LIST_TTL_S:
            listed = list_entries(settings().places)
            _listed = (time.monotonic(), listed)
        return list(listed)


def visible(card: dict, viewer_id: str | None) -> bool:
    """May the viewer (owner_id of its token) see a user model with this card?"""
    owner = card.get("owner")
    if not owner or card.get("published") is True:
        return True
    return viewer_id is not None and hmac.compare_digest(str(owner), viewer_id)


def _shown(entry: ModelEntry, viewer_id: str | None) -> ModelEntry:
    """The entry as a viewer gets it: no owner hash, but whether it is theirs and whether it is private."""
    if entry.kind != "user":
        return entry
    card = {k: v for k, v in entry.card.items() if k != "owner"}
    owner = entry.card.get("owner")
    card["mine"] = bool(owner) and viewer_id is not None and hmac.compare_digest(str(owner), viewer_id)
    card["private"] = bool(owner) and entry.card.get("published") is not True
    return ModelEntry(entry.key, entry.label, entry.kind, card)


def entries(viewer: str | None = None) -> list[ModelEntry]:
    """The models a viewer (its token) may see, shipped first: shipped, presets and GPT-2, published models,
    and the viewer's own. Call on every rerun with the browser's token; without one only public models show."""
    me = owner_id(viewer)
    return [_shown(e, me) for e in _all() if e.kind != "user" or visible(e.card, me)]


def refresh() -> None:
    """Forget the listing (a model was just saved)."""
    global _listed
    with _lock:
        _listed = (0.0, [])


def entry(key: str, viewer: str | None = None) -> ModelEntry | None:
    """The entry of a key if the viewer may see it, else None."""
    return next((e for e in entries(viewer) if e.key == key), None)


def link_models(viewer: str | None = None) -> dict[str, str]:
    """key -> label of the models a viewer may open from a link (urlstate.parse: by key or by a plain name)."""
    return {e.key: e.label for e in entries(viewer)}


def resolve(name: str, viewer: str | None = None) -> str | None:
    """The key a model's key or plain name ("dates-zh", "course-gpt", "GPT-2 small") opens for this viewer; None
    when it names none of its models, or several."""
    from .urlstate import model_key

    found = model_key(str(name), link_models(viewer))
    return found if isinstance(found, str) else None


def labels(viewer: str | None = None) -> set[str]:
    """The labels the viewer sees (a new model's name must differ from all of them)."""
    return {e.label for e in entries(viewer)}


def default_key() -> str:
    """The model the app opens on: the shipped one whose card says default, else the first shipped one."""
    shipped = [e for e in _all() if e.kind == "shipped"]
    chosen = [e for e in shipped if e.card.get("default")] or shipped
    return chosen[0].key if chosen else preset_key("course-base")


def _user_folder(key: str) -> Path | None:
    """The folder of a "user:<ref>" key (None for other kinds); ModelSourceError for a malformed ref."""
    kind, _, ref = str(key).partition(":")
    if kind != "user":
        return None
    if not REF.fullmatch(ref):
        raise ModelSourceError("model_unknown")
    return Path(settings().checkpoints_dir) / ref


def shipped_folder(key: str) -> Path | None:
    """The folder of a shipped model ("shipped:<name>"), for the files beside its weights; None for other kinds."""
    kind, _, ref = str(key).partition(":")
    if kind != "shipped" or not REF.fullmatch(ref):
        return None
    folder = Path(settings().places.shipped_dir) / ref
    return folder if folder.is_dir() else None


def load(key: str, device=None, viewer: str | None = None):
    """(model in eval mode, card) for a key the viewer may open. Another viewer's private model is refused
    exactly like a missing one (ModelSourceError model_unknown): a key reveals nothing. The memory the load takes
    is held in the server's budget while it runs (budget.MemoryBudgetError when it cannot fit)."""
    folder = _user_folder(key)
    if folder is not None:
        card = folder_card(folder) if (folder / WEIGHTS).is_file() else None
        if card is None or not visible(card, owner_id(viewer)):
            raise ModelSourceError("model_unknown")
    return load_any(key, device)


def load_any(key: str, device=None):
    """(model in eval mode, card without its owner) with no viewer check: for a cache shared by every session,
    after catalog.entry(key, viewer) said this viewer may open it. The load's memory is held in the server's
    budget while it runs (budget.MemoryBudgetError when it cannot fit)."""
    with budget.reserve(load_bytes(key), "model load"):
        model, card = load_model(key, settings().places, device)
    return model, {k: v for k, v in card.items() if k != "owner"}


def load_bytes(key: str) -> int:
    """Memory a load takes while it runs, asked of the key's source (0 when it cannot tell: the load will say)."""
    return sources_load_bytes(key, settings().places)


def is_admin(token: str | None) -> bool:
    """Whether a token is the instructor's admin token (compared in constant time; False when none is set)."""
    admin = settings().admin_token
    return bool(admin) and isinstance(token, str) and hmac.compare_digest(token.encode(), admin.encode())


def publish(key: str, admin_token: str, published: bool = True) -> None:
    """Show a trained or uploaded model to everyone (published=False makes it private to its owner again).
    Needs the instructor's admin token: PublishError `publish_off` when the server has none, `publish_denied` for a
    wrong one; ModelSourceError for a key that is not a saved model."""
    if not settings().admin_token:
        raise PublishError("publish_off")
    if not is_admin(admin_token):
        raise PublishError("publish_denied")
    folder = _user_folder(key)
    if folder is None or not (folder / WEIGHTS).is_file() or folder_card(folder) is None:
        raise ModelSourceError("model_unknown")
    card = json.loads((folder / CARD).read_text(encoding="utf-8")) if (folder / CARD).is_file() else {}
    card["published"] = bool(published)
    write_card(folder, card)
    refresh()


def _name_key(name: str) -> str:
    return unicodedata.normalize("NFKC", name).casefold().strip()


def clean_name(raw: object, taken=(), fallback: str = "model") -> str:
    """A model name fit to show next to others: NFKC-normalised; control, format and bidirectional characters
    (categories Cc, Cf: e.g. U+202E) and markup characters removed; whitespace collapsed; at most NAME_CHARS
    characters; never empty; and different (ignoring case) from every name in `taken`, by a "-2", "-3" suffix."""
    raw = raw if isinstance(raw, str) else fallback  # a damaged card's {"x": 1} is no name to show
    text = unicodedata.normalize("NFKC", raw[: 4 * NAME_CHARS])
    kept = []
    for ch in text:
        if ch.isspace():
            kept.append(" ")
        elif unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co", "Cn") and ch not in MARKUP:
            kept.append(ch)
    name = " ".join("".join(kept).split())[:NAME_CHARS].strip() or fallback
    used = {_name_key(str(t)) for t in taken}
    if _name_key(name) not in used:
        return name
    for n in range(2, len(used) + 3):
        suffix = f"-{n}"
        candidate = name[: NAME_CHARS - len(suffix)].rstrip() + suffix
        if _name_key(candidate) not in used:
            return candidate
    raise AssertionError("unreachable: more names than candidates")


def name_for(raw: object, viewer: str | None = None) -> str:
    """clean_name against every label the viewer sees (shipped, presets, GPT-2, published, their own)."""
    return clean_name(raw, labels(viewer))
