"""tiktoken wrapper: tokens with ids, bytes and display strings; safe on any user text."""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

import tiktoken

DEFAULT_ENCODING = "cl100k_base"
KNOWN_ENCODINGS = ("cl100k_base", "r50k_base", "p50k_base", "o200k_base")
CHARS_PER_TOKEN_BOUND = 32  # encode at most this many characters per allowed token (bounded work)

_lock = threading.Lock()
_cache: dict[str, tiktoken.Encoding] = {}


class EncodingUnavailable(RuntimeError):
    """A tiktoken encoding could not be loaded (usually: offline with no cache)."""


def load_encoding(name: str = DEFAULT_ENCODING) -> tiktoken.Encoding:
    """Load (once per process) a tiktoken encoding, or raise EncodingUnavailable with a fix."""
    with _lock:
        if name not in _cache:
            try:
                _cache[name] = tiktoken.get_encoding(name)
            except Exception as exc:  # network errors, bad hashes, unknown names
                cache = os.environ.get("TIKTOKEN_CACHE_DIR", "(not set)")
                raise EncodingUnavailable(
                    f"Cannot load the tiktoken encoding {name!r} ({type(exc).__name__}: {exc}). "
                    f"Without internet tiktoken reads its files from TIKTOKEN_CACHE_DIR (now: {cache}). "
                    "Fill that folder once on a machine with internet: set TIKTOKEN_CACHE_DIR to it and run "
                    f"python -c \"import tiktoken; tiktoken.get_encoding('{name}')\"; then copy it to the "
                    "offline machine and set TIKTOKEN_CACHE_DIR there."
                ) from exc
        return _cache[name]


def available_encodings() -> list[str]:
    """Encoding names tiktoken knows about (loading may still fail offline)."""
    return sorted(set(tiktoken.list_encoding_names()) | {DEFAULT_ENCODING})


def clean_text(text: str) -> tuple[str, bool]:
    """Replace lone surrogates (broken Unicode) with U+FFFD; return (text, changed)."""
    try:
        text.encode("utf-8")
        return text, False
    except UnicodeEncodeError:
        fixed = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        # unpaired surrogates may survive utf-16 round trips on some inputs: drop what remains
        fixed = fixed.encode("utf-8", "replace").decode("utf-8")
        return fixed, True


def display_bytes(raw: bytes) -> str:
    """Show a token: its text if it is valid UTF-8, else its bytes as <0xE8>."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "".join(f"<0x{b:02X}>" for b in raw)


@dataclass(frozen=True)
class Token:
    id: int
    raw: bytes
    text: str  # display string: the decoded text, or <0x..> bytes for a partial UTF-8 character
    group: int  # tokens with the same group together form whole characters
    partial: bool  # True when this token alone is not valid UTF-8
    special: bool = False


@dataclass
class Tokenized:
    """Text encoded by one encoding, with the notes the UI shows."""

    text: str
    encoding: str
    tokens: list[Token]
    n_chars: int
    n_bytes: int
    truncated: bool = False  # the token list was cut to max_tokens
    cleaned: bool = False  # broken Unicode was replaced with U+FFFD
    n_tokens_before_truncation: int | None = None
    groups: list[tuple[str, list[int]]] = field(default_factory=list)  # (characters, token indexes)

    @property
    def ids(self) -> list[int]:
        return [t.id for t in self.tokens]


def _group_tokens(raws: list[bytes]) -> tuple[list[int], list[tuple[str, list[int]]]]:
    """Group consecutive tokens until their bytes decode as whole UTF-8 characters."""
    group_of, groups, buf, members = [], [], b"", []
    for i, raw in enumerate(raws):
        buf += raw
        members.append(i)
        group_of.append(len(groups))
        try:
            chars = buf.decode("utf-8")
        except UnicodeDecodeError:
            if len(buf) < 64:
                continue
            chars = buf.decode("utf-8", "replace")  # never let a broken run swallow the rest
        groups.append((chars, members))
        buf, members = b"", []
    if members:
        groups.append((buf.decode("utf-8", "replace"), members))
    return group_of, groups


def tokenize(
    text: str,
    encoding: str = DEFAULT_ENCODING,
    *,
    allow_special: bool = False,
    max_tokens: int | None = None,
) -> Tokenized:
    """Encode user text; never raises on its content (special-token text is plain text by default)."""
    enc = load_encoding(encoding)
    text, cleaned = clean_text(text if isinstance(text, str) else str(text))
    n_chars, n_bytes = len(text), len(text.encode("utf-8"))
    work = text
    if max_tokens is not None:
        work = text[: max(1_000, CHARS_PER_TOKEN_BOUND * max_tokens)]
    allowed = "all" if allow_special else set()
    ids = enc.encode(work, allowed_special=allowed, disallowed_special=())
    n_before = len(ids)
    truncated = len(work) < len(text)
    if max_tokens is not None and len(ids) > max_tokens:
        ids, truncated = ids[:max_tokens], True
    raws = [enc.decode_single_token_bytes(i) for i in ids]
    group_of, groups = _group_tokens(raws)
    special_ids = {enc.encode_single_token(s) for s in enc.special_tokens_set} if allow_special else set()
    tokens = [
        Token(id=i, raw=r, text=display_bytes(r), group=g, partial=_is_partial(r), special=i in special_ids)
        for i, r, g in zip(ids, raws, group_of)
    ]
    return Tokenized(
        text=text, encoding=encoding, tokens=tokens, n_chars=n_chars, n_bytes=n_bytes,
        truncated=truncated, cleaned=cleaned,
        n_tokens_before_truncation=n_before if truncated else None, groups=groups,
    )


def _is_partial(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def token_strings(ids: list[int], encoding: str = DEFAULT_ENCODING) -> list[str]:
    """Display strings for token ids (ids outside the vocabulary show as <id>)."""
    enc = load_encoding(encoding)
    out = []
    for i in ids:
        try:
            out.append(display_bytes(enc.decode_single_token_bytes(int(i))))
        except (KeyError, ValueError):
            out.append(f"<{int(i)}>")
    return out


def decode(ids: list[int], encoding: str = DEFAULT_ENCODING) -> str:
    """Decode ids to text (broken UTF-8 shown as U+FFFD)."""
    enc = load_encoding(encoding)
    return enc.decode_bytes([int(i) for i in ids]).decode("utf-8", "replace")
