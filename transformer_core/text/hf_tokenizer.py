"""A Hugging Face byte-level BPE `tokenizer.json` (SmolLM2's, Qwen2's, GPT-2's) as a tiktoken Encoding, so every page
keeps one live tokenizer whatever the model family.

Byte-level BPE is what tiktoken runs: the same 256 byte tokens, merges applied lowest rank first inside each piece
that a regex cuts. What differs is spelling: HF writes each byte as a printable character (GPT-2's bytes_to_unicode
table) and lists merges separately, where tiktoken ranks each token's bytes. A token's rank is its id, so the
conversion keeps the model's ids; it needs the ids of merged tokens to grow in merge order (true of every tokenizer
trained by `tokenizers` and of Qwen2's), and refuses a file where they do not. The pre-tokenizer becomes the regex
that cuts the same pieces; the normalizer, when there is one (Qwen2: NFC), runs before encoding.
"""
from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import tiktoken

from ..errors import EncodingUnavailable

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# GPT-2's pattern after a Digits(individual_digits=True) pre-tokenizer (SmolLM2): every numeric character alone,
# and a run of spaces before one ends there, as it would at the end of a piece
DIGITS_GPT2_PATTERN = r"""\p{N}|'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?![^\s\p{N}])|\s+"""
MAX_FILE_BYTES = 64 * 2**20  # Qwen2's tokenizer.json is 7 MB


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table: each byte as one printable character (printable Latin-1 bytes as themselves)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = dict(zip(keep, map(chr, keep), strict=True)), 0
    for b in range(256):
        if b not in chars:
            chars[b], extra = chr(256 + extra), extra + 1
    return chars


def _refuse(why: str) -> EncodingUnavailable:
    return EncodingUnavailable("hf_tokenizer_unsupported", why=why)


def _pattern(pre: dict | None) -> str:
    """The regex that cuts the pieces this pre-tokenizer cuts (byte-level BPE families only)."""
    if not isinstance(pre, dict):
        raise _refuse("pre_tokenizer")
    parts = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    kinds = [p.get("type") for p in parts]
    level = parts[-1] if kinds and kinds[-1] == "ByteLevel" else None
    if level is None or level.get("add_prefix_space"):
        raise _refuse("ByteLevel")
    if kinds == ["ByteLevel"] and level.get("use_regex", True):
        return GPT2_PATTERN
    if kinds == ["Digits", "ByteLevel"] and parts[0].get("individual_digits") and level.get("use_regex", True):
        return DIGITS_GPT2_PATTERN
    if (kinds == ["Split", "ByteLevel"] and not level.get("use_regex", True) and parts[0].get("behavior") == "Isolated"
            and not parts[0].get("invert") and "Regex" in (parts[0].get("pattern") or {})):
        return parts[0]["pattern"]["Regex"]
    raise _refuse("+".join(map(str, kinds)))


def _normalizer(spec: dict | None):
    """None, or the Unicode normal form to apply before encoding (Qwen2 uses NFC)."""
    if spec is None:
        return None
    if spec.get("type") in ("NFC", "NFKC", "NFD", "NFKD"):
        return spec["type"]
    raise _refuse(f"normalizer {spec.get('type')}")


class HFEncoding(tiktoken.Encoding):
    """tiktoken's Encoding with the tokenizer's normalizer applied to the text first (none for most)."""

    def __init__(self, *, normal_form: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.normal_form = normal_form

    def _norm(self, text: str) -> str:
        return unicodedata.normalize(self.normal_form, text) if self.normal_form else text

    def encode(self, text: str, *args, **kwargs) -> list[int]:
        return super().encode(self._norm(text), *args, **kwargs)

    def encode_ordinary(self, text: str) -> list[int]:
        return super().encode_ordinary(self._norm(text))


def encoding_from_json(spec: dict, name: str) -> HFEncoding:
    """The tiktoken Encoding equal to a parsed tokenizer.json (ids kept); EncodingUnavailable for other kinds."""
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise _refuse(f"model {model.get('type')}")
    if model.get("byte_fallback") or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        raise _refuse("BPE options")
    to_byte = {c: b for b, c in bytes_to_unicode().items()}
    added = {t["content"]: int(t["id"]) for t in spec.get("added_tokens") or [] if isinstance(t, dict)}
    ranks: dict[bytes, int] = {}
    for token, i in model["vocab"].items():
        if token in added:
            continue
        try:
            ranks[bytes(to_byte[c] for c in token)] = int(i)
        except KeyError:
            raise _refuse("vocabulary not byte-level") from None
    if len({ranks.get(bytes([b])) for b in range(256)} - {None}) != 256:
        raise _refuse("missing byte tokens")
    last = -1
    for merge in model.get("merges") or []:  # "a b" or ["a", "b"]
        a, b = merge.split(" ", 1) if isinstance(merge, str) else merge
        rank = ranks.get(bytes(to_byte[c] for c in a + b))
        if rank is None or rank <= last:
            raise _refuse("merge order")
        last = rank
    return HFEncoding(name=name, pat_str=_pattern(spec.get("pre_tokenizer")), mergeable_ranks=ranks,
                      special_tokens=added, normal_form=_normalizer(spec.get("normalizer")))


def load_tokenizer_json(path: str | Path, name: str) -> HFEncoding:
    """Read a tokenizer.json file (bounded in size) and convert it."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise _refuse("size")
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise _refuse("file") from exc
    if not isinstance(spec, dict):
        raise _refuse("file")
    return encoding_from_json(spec, name)
