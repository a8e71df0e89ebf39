"""tiktoken wrapper: tokens with ids, bytes and display strings; safe on any user text."""
from __future__ import annotations

import binascii
import hashlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import tiktoken
import tiktoken_ext.openai_public as openai_public

from ..errors import EncodingUnavailable, Reason, reason_of
from .subset import subset_meta

DEFAULT_ENCODING = "cl100k_base"
BUNDLED = Path(__file__).resolve().parents[2] / "assets" / "encodings"  # NAME.tiktoken: works offline
SUBSETS = tuple(sorted(p.stem for p in BUNDLED.glob("*.json")))  # shipped subsets of an encoding (text/subset.py)
ENCODINGS = SUBSETS + tuple(tiktoken.list_encoding_names())  # the only names accepted (never a path)
CHARS_PER_TOKEN_BOUND = 32  # encode at most this many characters per allowed token (bounded work)

DOWNLOAD_WAIT_S = 15.0  # a request waits this long for an encoding that is not shipped, then gets a message
_locks_lock = threading.Lock()
_locks: dict[str, threading.Lock] = {}  # one per encoding name: loading one never blocks another
_cache: dict[str, tiktoken.Encoding] = {}
_pending: dict[str, _Fetch] = {}  # downloads in flight


def _bundled(name: str) -> tiktoken.Encoding | None:
    """The encoding built from its shipped BPE file with tiktoken's own constructor (pattern, special tokens)
    and tiktoken's expected sha256, so a damaged file is refused; None when nothing is shipped for it."""
    if not (BUNDLED / f"{name}.tiktoken").is_file():
        return None

    def local(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        raw = (BUNDLED / url.rsplit("/", 1)[-1]).read_bytes()  # read here: nothing is copied into a cache
        if expected_hash and hashlib.sha256(raw).hexdigest() != expected_hash:
            raise ValueError(f"{name}.tiktoken does not have tiktoken's expected sha256")
        parts = raw.split()  # token rank token rank …: a third faster than line by line (first page, cold)
        return dict(zip(map(binascii.a2b_base64, parts[0::2]), map(int, parts[1::2]), strict=True))

    meta = subset_meta(BUNDLED, name)
    if meta is not None:  # the base encoding's pattern and special tokens (its ranks are not read), the subset's ranks
        with mock.patch.object(openai_public, "load_tiktoken_bpe", lambda *a, **k: {}):
            base = openai_public.ENCODING_CONSTRUCTORS[meta["base"]]()
        parts = (BUNDLED / f"{name}.tiktoken").read_bytes().split()
        ranks = dict(zip(map(binascii.a2b_base64, parts[0::2]), map(int, parts[1::2]), strict=True))
        return tiktoken.Encoding(name=name, pat_str=base["pat_str"], mergeable_ranks=ranks,
                                 special_tokens=base["special_tokens"])
    with mock.patch.object(openai_public, "load_tiktoken_bpe", local):
        return tiktoken.Encoding(**openai_public.ENCODING_CONSTRUCTORS[name]())


def load_encoding(name: str = DEFAULT_ENCODING) -> tiktoken.Encoding:
    """Load (once per process) a tiktoken encoding: the shipped file, else tiktoken's cache or download.

    Never blocks another encoding: one lock per name. A download runs on its own thread and is waited for at most
    DOWNLOAD_WAIT_S seconds (tiktoken sets no timeout); a caller that gives up gets a message, and the next
    request finds the result (or, after a failure, tries again)."""
    if name in _cache:  # (also an encoding a model family registered: register_encoding)
        return _cache[name]
    if name not in ENCODINGS and subset_meta(BUNDLED, str(name)) is None:  # (a subset written since start-up)
        raise EncodingUnavailable("encoding_unknown", name=str(name)[:40], choices=", ".join(ENCODINGS))
    if name in _cache:
        return _cache[name]
    with _locks_lock:
        lock = _locks.setdefault(name, threading.Lock())
    if (BUNDLED / f"{name}.tiktoken").is_file():  # shipped: read here, never waits on a download
        with lock:
            if name not in _cache:
                try:
                    _cache[name] = _bundled(name)
                except Exception as exc:
                    raise EncodingUnavailable("encoding_unavailable", name=name, reason=reason_of(exc)) from exc
            return _cache[name]
    with lock:
        pending = _pending.get(name)
        if pending is None:
            pending = _pending[name] = _Fetch(name)
    if not pending.done.wait(DOWNLOAD_WAIT_S):
        raise EncodingUnavailable("encoding_unavailable", name=name, reason=Reason("timeout"))
    with lock:
        if _pending.get(name) is pending:
            del _pending[name]  # a failure is tried again by the next request
    if pending.error is not None:
        raise EncodingUnavailable("encoding_unavailable", name=name, reason=reason_of(pending.error))
    return _cache[name]


def register_encoding(enc: tiktoken.Encoding) -> None:
    """Make an encoding a model brought with it (a converted tokenizer.json) loadable by its name, like the others."""
    if enc.name in ENCODINGS:
        raise EncodingUnavailable("encoding_unknown", name=enc.name[:40], choices=", ".join(ENCODINGS))
    _cache[enc.name] = enc


class _Fetch:
    """tiktoken's own load (its cache, else a download) on a daemon thread, so a caller can stop waiting."""

    def __init__(self, name: str) -> None:
        self.done, self.error = threading.Event(), None
        threading.Thread(target=self._run, args=(name,), name=f"encoding-{name}", daemon=True).start()

    def _run(self, name: str) -> None:
        try:
            _cache[name] = tiktoken.get_encoding(name)
        except Exception as exc:  # noqa: BLE001 - kept for the callers, who turn it into a message
            self.error = exc
        finally:
            self.done.set()


def available_encodings() -> list[str]:
    """Encoding names tiktoken knows about, shipped ones first (others may need a network or a cache)."""
    shipped = sorted(n for n in ENCODINGS if (BUNDLED / f"{n}.tiktoken").is_file())
    return shipped + sorted(n for n in ENCODINGS if n not in shipped)


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


def display_bytes(raw: bytes, short: bool = False) -> str:
    """Show a token: its text if it is valid UTF-8, else its bytes as <0xE8> (the Tokenizer and BPE pages), or with
    short=True as "‹E6 98›": a piece of a character shown on its own (a predicted token), short enough for a cell."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "‹" + " ".join(f"{b:02X}" for b in raw) + "›" if short else "".join(f"<0x{b:02X}>" for b in raw)


def piece_of(raw: bytes) -> tuple[str, ...] | None:
    """What a token that is only part of a character (display_bytes shows it as "‹E7 A1›") can be part of: ("begins",
    first, last, n) when it ends with a character's first bytes (the n characters it can begin, first to last), or
    ("ends",) when it is only a character's last bytes; None for a token that decodes (whole characters)."""
    try:
        raw.decode("utf-8")
        return None
    except UnicodeDecodeError:
        pass
    lead = max((i for i, b in enumerate(raw) if b & 0xC0 != 0x80), default=None)  # the last byte that starts one
    if lead is None or raw[lead] < 0xC2 or raw[lead] > 0xF4:
        return ("ends",)
    tail = raw[lead:]
    missing = (2 if raw[lead] < 0xE0 else 3 if raw[lead] < 0xF0 else 4) - len(tail)
    if missing <= 0:
        return ("ends",)
    # only the byte after the first can be out of range (E0, ED, F0, F4 narrow it); every later one takes all 64
    firsts = [b for b in range(0x80, 0xC0) if _decodes(tail + bytes([b]) + b"\x80" * (missing - 1))]
    if not firsts:
        return ("ends",)
    first = (tail + bytes([firsts[0]]) + b"\x80" * (missing - 1)).decode("utf-8")
    last = (tail + bytes([firsts[-1]]) + b"\xbf" * (missing - 1)).decode("utf-8")
    return ("begins", first, last, str(len(firsts) * 64 ** (missing - 1)))


def _decodes(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


@dataclass(frozen=True)
class Token:
    id: int
    raw: bytes
    text: str  # display string: the decoded text, or <0x..> bytes for a partial UTF-8 character
    group: int  # tokens with the same group together form whole characters
    partial: bool  # True when this token alone is not valid UTF-8
    special: bool = False
    unknown: bool = False  # outside the model's vocabulary: the model read its unknown id instead


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
        except UnicodeDecodeError as e:
            # wait for the next token only while the bytes are a character cut short; a run that can never become
            # valid (a window starting mid-character: a lone continuation byte) closes at once, not with the rest
            if e.reason == "unexpected end of data" and len(buf) < 64:
                continue
            chars = buf.decode("utf-8", "replace")
        groups.append((chars, members))
        buf, members = b"", []
    if members:
        groups.append((buf.decode("utf-8", "replace"), members))
    return group_of, groups


def label_pieces(raws: list[bytes], labels: list[str]) -> list[str]:
    """Labels of adjacent tokens (their bytes `raws`) with each token that is only part of a character shown as
    that character and which piece it is ("明 1/2", "明 2/2") instead of its bytes ("<0xE6><0x98>")."""
    labels = list(labels)
    for chars, members in _group_tokens(raws)[1]:
        whole = not _is_partial(b"".join(raws[m] for m in members))  # not a character cut off at either end
        if len(members) > 1 and whole and any(_is_partial(raws[m]) for m in members):
            for k, m in enumerate(members, 1):
                labels[m] = f"{chars}\u00a0{k}/{len(members)}"  # a no-break space: not a token's own space (␣)
    return labels


def text_around(raws: list[bytes], k: int) -> tuple[str, str]:
    """The text before and after token k of adjacent tokens (their bytes `raws`), whole characters only: the bytes of
    a character token k is part of go with it, not with either side, and bytes that make no whole character (one cut
    off at the window's edge) are left out. So a neuron's snippet reads "队操作的", not its tokens' labels joined
    ("队操 1/3操 2/3操 3/3作的")."""
    data = b"".join(raws)
    start = sum(map(len, raws[:k]))
    end = start + len(raws[k])
    while 0 < start < len(data) and data[start] & 0xC0 == 0x80:  # a continuation byte (0b10xxxxxx): back to its lead
        start -= 1
    while end < len(data) and data[end] & 0xC0 == 0x80:
        end += 1
    return data[:start].decode("utf-8", "ignore"), data[end:].decode("utf-8", "ignore")


def character_labels(ids: list[int], encoding: str = DEFAULT_ENCODING) -> list[str]:
    """Display strings of a sequence of this encoding's ids, a part of a character shown with its character."""
    enc = load_encoding(encoding)
    raws = [enc.decode_single_token_bytes(i) for i in ids]
    return label_pieces(raws, [display_bytes(r) for r in raws])


def encode_by_line(enc, text: str, allowed_special: str | frozenset = frozenset()) -> list[int]:
    """Ids of a text encoded one line at a time with the id of "\\n" between lines (decodes to exactly `text`).

    Whole-text BPE merges a line end into the token before it ("。\\n", ".\\n"); a model trained one line at a
    time (every model with its own vocabulary) never saw those tokens, and learned to predict the "\\n" itself.
    """
    newline = enc.encode_ordinary("\n")  # not encode(): its check for special tokens imports `regex` (50 ms)
    ids: list[int] = []
    for k, line in enumerate(text.split("\n")):
        ids += (newline if k else []) + enc.encode(line, allowed_special=allowed_special, disallowed_special=())
    return ids


def tokenize(
    text: str,
    encoding: str = DEFAULT_ENCODING,
    *,
    allow_special: bool = False,
    max_tokens: int | None = None,
    by_line: bool = False,
) -> Tokenized:
    """Encode user text; never raises on its content (special-token text is plain text by default).
    by_line: line ends as their own token, the way models with their own vocabulary were trained."""
    enc = load_encoding(encoding)
    text, cleaned = clean_text(text if isinstance(text, str) else str(text))
    n_chars, n_bytes = len(text), len(text.encode("utf-8"))
    work = text
    if max_tokens is not None:
        work = text[: max(1_000, CHARS_PER_TOKEN_BOUND * max_tokens)]
    allowed = "all" if allow_special else set()
    ids = encode_by_line(enc, work, allowed) if by_line else enc.encode(work, allowed_special=allowed,
                                                                         disallowed_special=())
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
    """Is this token's text only part of a character (not valid UTF-8 on its own)?"""
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
    """Decode ids to text (broken UTF-8 shown as U+FFFD; an id with no token, a hole in a hub model's numbering above
    its tokenizer's, as <id>)."""
    enc = load_encoding(encoding)
    try:
        return enc.decode_bytes([int(i) for i in ids]).decode("utf-8", "replace")
    except (KeyError, ValueError):
        return b"".join(token_bytes(enc, i) or f"<{int(i)}>".encode() for i in ids).decode("utf-8", "replace")


def token_bytes(enc, i: int) -> bytes | None:
    """One tokenizer id's bytes; None for the unknown id (-1) and an id with no token (holes in the vocabulary)."""
    try:
        return enc.decode_single_token_bytes(int(i)) if int(i) >= 0 else None
    except (KeyError, ValueError):
        return None


def tokens_of(ids: list[int], encoding: str = DEFAULT_ENCODING) -> list[Token]:
    """Token objects (display text, bytes, UTF-8 groups) for tokenizer ids, e.g. a generated sequence."""
    enc = load_encoding(encoding)
    raws = [token_bytes(enc, i) for i in ids]
    group_of, _ = _group_tokens([r or b"" for r in raws])
    return [Token(id=int(i), raw=r or b"", text=("⟨unk⟩" if int(i) < 0 else f"<{int(i)}>") if r is None
                  else display_bytes(r), group=g, partial=r is not None and _is_partial(r), unknown=int(i) < 0)
            for i, r, g in zip(ids, raws, group_of)]
