"""The URL parameters the app mirrors (a shared link restores a learner's place), parsed defensively.

One schema (PARAMS) gives every parameter its type, range and default. parse() never raises: a missing value takes
its default, and a bad or oversized one (`layer=²`, a 5000-digit number, a negative head, a text over the cap, an
unknown model) takes its default too and adds a notice (a UrlNotice: an ExplorerError whose code has an "err.<code>"
message in both languages). encode() is the way back: defaults are left out, and texts that would make the link
longer than MAX_QUERY_CHARS are left out (and named, so the page can say "text left out of the link").
Ranges that depend on the model (layer < n_layers, head < n_heads) are checked by clamp() once the model is known.
The page is the URL's path, not a parameter. Pure: no Streamlit, no tensors.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from transformer_core.errors import ExplorerError, message
from transformer_core.model.hooks import BLOCKS as ATTENTION_BLOCKS
from transformer_core.model.masks import MASK_MODES
from transformer_core.text.tokenizer import ENCODINGS

MAX_QUERY_CHARS = 2000  # the whole query string of a link the app writes, percent-encoded
MAX_TEXT_CHARS = 2000  # a text read from a link (a longer one is refused, not cut)
MAX_PARAM_CHARS = 20_000  # all values together: a link longer than this is ignored as a whole
# The one list of each choice a link may carry; the pages offer the same ones (ui.i18n, ui.figures read these).
LANGS = {"en": "English", "zh": "中文"}  # code -> the language's own name
BLOCKS = tuple(ATTENTION_BLOCKS)  # enc_self, dec_self, cross
SCALES = ("01", "row", "log")  # how softmax weights are coloured: 0 to 1, each row by its maximum, log10


class UrlNotice(ExplorerError, ValueError):
    """A URL value that was replaced by its default (the code and parameters say which and why)."""

    code = "url_value"


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # key, text, choice, int, float, ids
    default: object = None  # None: the page decides (the model's example text, the browser's language, ...)
    lo: float | None = None
    hi: float | None = None
    choices: tuple = ()
    low_open: bool = False  # lo itself is not allowed (top-p > 0)


PARAMS: dict[str, Param] = {p.name: p for p in (
    Param("model", "key"),
    Param("text", "text"),
    Param("tgt", "text"),
    Param("enc", "choice", "cl100k_base", choices=ENCODINGS),
    Param("lang", "choice", choices=tuple(LANGS)),
    Param("layer", "int", 0, 0, 255),
    Param("head", "int", 0, 0, 255),
    Param("block", "choice", choices=BLOCKS),
    Param("mask", "choice", choices=MASK_MODES),
    Param("scale", "choice", "01", choices=SCALES),
    Param("T", "float", 1.0, 0.01, 100.0),  # sampling temperature
    Param("k", "int", 0, 0, 1_000_000),  # top-k, 0 = off
    Param("p", "float", 1.0, 0.0, 1.0, low_open=True),  # top-p, 1 = off
    Param("seed", "int", 0, 0, 2**31 - 1),
    Param("gen", "ids", (), 0, 10_000_000),  # the generated tokens' model ids, "12,7,9"
    Param("nlayer", "int", None, 0, 255),  # the FFN page's neuron read: its layer
    Param("neuron", "int", None, 0, 10_000_000),  # and the neuron
)}
MAX_IDS = 256
_INT = re.compile(r"[0-9]{1,10}")  # ASCII digits only: "²" or "٣" are not numbers here
_FLOAT = re.compile(r"[0-9]{1,6}(?:\.[0-9]{1,8})?")
_IDS = re.compile(rf"[0-9]{{1,8}}(?:,[0-9]{{1,8}}){{0,{MAX_IDS - 1}}}")
_KEY = re.compile(r"[a-z0-9]{1,16}:[A-Za-z0-9_.@:-]{1,160}")


def defaults() -> dict[str, object]:
    return {name: p.default for name, p in PARAMS.items()}


def _value(p: Param, raw: str):
    """The typed value of one raw string, or a UrlNotice explaining why not."""
    bad = UrlNotice("url_value", name=p.name)
    if p.kind == "text":
        if len(raw) > MAX_TEXT_CHARS:
            return UrlNotice("url_text_too_long", name=p.name, limit=MAX_TEXT_CHARS)
        return raw
    if p.kind == "key":
        return raw if _KEY.fullmatch(raw) else UrlNotice("url_model_unknown")
    if p.kind == "choice":
        return raw if raw in p.choices else bad
    if p.kind == "int":
        if not _INT.fullmatch(raw):
            return bad
        value = int(raw)
    elif p.kind == "float":
        if not _FLOAT.fullmatch(raw):
            return bad
        value = float(raw)
    else:  # ids
        if not _IDS.fullmatch(raw):
            return bad
        value = tuple(int(x) for x in raw.split(","))
        return value if all(p.lo <= v <= p.hi for v in value) else bad
    too_low = value <= p.lo if p.low_open else value < p.lo
    return bad if too_low or value > p.hi else value


MAX_NAME_CHARS = 200  # a model's plain name in a link


def plain_names(key: str, label: str | None = None) -> set[str]:
    """The names a link may give a model instead of its key, casefolded: the key's part after its kind
    ("shipped:dates-zh" -> "dates-zh"), that part without its encoding ("preset:course-gpt@cl100k_base" ->
    "course-gpt") and its label ("GPT-2 small")."""
    ref = key.partition(":")[2]
    return {n.casefold() for n in (ref, ref.partition("@")[0], label or "") if n}


def model_key(raw: str, models) -> str | UrlNotice:
    """The key a link's `model` value opens among `models` (keys, or a mapping key -> label): the key itself, or a
    plain name (plain_names) that names exactly one of them; else a notice (unknown, or which models it could be)."""
    if raw in models:
        return raw
    if len(raw) > MAX_NAME_CHARS:
        return UrlNotice("url_model_unknown")
    labels = models if isinstance(models, dict) else dict.fromkeys(models)
    found = sorted(k for k, label in labels.items() if raw.strip().casefold() in plain_names(k, label))
    if len(found) == 1:
        return found[0]
    return UrlNotice("url_model_ambiguous", models=", ".join(found)) if found else UrlNotice("url_model_unknown")


def parse(params: dict, models=None) -> tuple[dict[str, object], list[UrlNotice]]:
    """(every parameter's value, notices) from a URL's query parameters; never raises.

    `params` maps names to strings (a list takes its last item); unknown names are ignored. `models`, when given,
    is the keys the viewer may open (or a mapping key -> label): a model is named by its key or by a plain name
    that names one of them (model_key: `?model=dates-zh`); anything else falls back to the default (None) with a
    notice. Values are typed: ints, floats, a tuple of ids for gen, strings otherwise; None means "the page's
    default"."""
    values, notices = defaults(), []
    try:
        items = {str(k): (v[-1] if isinstance(v, (list, tuple)) and v else v) for k, v in dict(params).items()}
    except Exception:  # noqa: BLE001 - not a mapping at all
        return values, [UrlNotice("url_too_long", n="?")]
    known = {k: v for k, v in items.items() if k in PARAMS}
    size = sum(len(v) if isinstance(v, str) else MAX_PARAM_CHARS for v in known.values())
    if size > MAX_PARAM_CHARS:
        return values, [UrlNotice("url_too_long", n=size)]
    for name, raw in known.items():
        if not isinstance(raw, str):
            notices.append(UrlNotice("url_value", name=name))
            continue
        got = model_key(raw, models) if name == "model" and models is not None else _value(PARAMS[name], raw)
        if isinstance(got, UrlNotice):
            notices.append(got)
        else:
            values[name] = got
    return values, notices


def clamp(values: dict[str, object], n_layers: int, n_heads: int, blocks=None,
          d_ffn: int | None = None) -> tuple[dict[str, object], list[UrlNotice]]:
    """The values with layer < n_layers, head < n_heads, block among `blocks` (the model's attention kinds) and the
    FFN page's neuron (nlayer < n_layers, neuron < d_ffn), a value out of range replaced by its default with a
    `url_clamped` notice."""
    out, notices = dict(values), []
    for name, n in (("layer", n_layers), ("head", n_heads), ("nlayer", n_layers), ("neuron", d_ffn)):
        if n is None or name not in out:
            continue
        v = out.get(name)
        if isinstance(v, int) and not 0 <= v < max(int(n), 1):
            notices.append(UrlNotice("url_clamped", name=name, value=v, n=n))
            out[name] = PARAMS[name].default
    if blocks is not None and out.get("block") is not None and out["block"] not in tuple(blocks):
        notices.append(UrlNotice("url_value", name="block"))
        out["block"] = PARAMS["block"].default
    return out, notices


def summary(notices: list[UrlNotice], lang: str = "en") -> str | None:
    """One line for the page: the notice itself, or (several) the names of the values replaced by defaults."""
    if not notices:
        return None
    if len(notices) == 1:
        return notices[0].text(lang)
    names = sorted({str(n.params.get("name", "model")) for n in notices})
    return message("url_values", lang, names=", ".join(names))


class Encoded(dict):
    """Query parameters for a link (a plain dict of strings) plus `left_out`: values too long for a link."""

    left_out: tuple[str, ...] = ()

    @property
    def text_left_out(self) -> bool:
        """Whether the text or target was left out (the page says so next to its share hint)."""
        return "text" in self.left_out or "tgt" in self.left_out


def _string(p: Param, value) -> str:
    if p.kind == "float":
        return f"{float(value):.6f}".rstrip("0").rstrip(".")
    if p.kind == "ids":
        return ",".join(str(int(v)) for v in value)
    return str(value)


def query_length(params: dict[str, str]) -> int:
    return len(urlencode(params, quote_via=quote))


def encode(values: dict[str, object], page_defaults: dict[str, object] | None = None) -> Encoded:
    """The query parameters of a link to `values`, in PARAMS order: a value equal to its default (PARAMS's, or
    `page_defaults`' e.g. the model's example text) or None is left out, so is one that would not parse back, and
    when the link would be longer than MAX_QUERY_CHARS the longest of text / tgt / gen are left out (named in
    `left_out`) until it fits."""
    base = defaults() | (page_defaults or {})
    out, left = {}, []
    for name, p in PARAMS.items():
        value = values.get(name)
        if value is None or value == base.get(name) or (p.kind == "ids" and not value):
            continue
        text = _string(p, value)
        if isinstance(_value(p, text), UrlNotice):
            left.append(name)
            continue
        out[name] = text
    for name in sorted((n for n in ("text", "tgt", "gen") if n in out), key=lambda n: -len(out[n])):
        if query_length(out) <= MAX_QUERY_CHARS:
            break
        del out[name]
        left.append(name)
    encoded = Encoded(out)
    encoded.left_out = tuple(left)
    return encoded
