"""Uploaded JSON read with limits (size, nesting depth) and an uploaded model's config checked field by field (bounds,
a known encoding, parameter count and memory within the server's limits) before anything is built from it."""
from __future__ import annotations

import json
import re

from transformer_core.errors import CheckpointError, ConfigError, EncodingUnavailable
from transformer_core.model.config import TransformerConfig
from transformer_core.model.memory import param_bytes, param_count
from transformer_core.text.tokenizer import ENCODINGS, load_encoding

from . import budget
from .settings import settings

MAX_HEADER_BYTES = 1 << 20
MAX_JSON_DEPTH = 8  # a config is an object holding one list; a safetensors header is three levels deep
SEED_MAX = 2**63 - 1

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)


def json_depth(text: str) -> int:
    """How deeply JSON text nests arrays and objects, counted without recursion (strings skipped)."""
    depth = most = 0
    for m in re.finditer(r"[\[\]{}]", _JSON_STRING.sub("", text)):
        depth += 1 if m.group() in "[{" else -1
        most = max(most, depth)
    return most


def parse_json(text: str | bytes, max_bytes: int = MAX_HEADER_BYTES, max_depth: int = MAX_JSON_DEPTH):
    """json.loads with limits: ConfigError `config_too_large`, `config_too_deep` (never a RecursionError) or
    `config_not_json`."""
    if len(text) > max_bytes:
        raise ConfigError("config_too_large", kb=max_bytes // 1024)
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError("config_not_json") from exc
    if json_depth(text) > max_depth:
        raise ConfigError("config_too_deep", depth=max_depth)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError("config_not_json") from exc


def object_depth(obj, max_depth: int = MAX_JSON_DEPTH) -> int:
    """How deeply a Python object nests lists, tuples and dicts (iterative; stops counting past max_depth + 1)."""
    most, stack = 0, [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, tuple, dict)):
            most = max(most, depth)
            if depth > max_depth:
                return depth
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return most


def check_config(data) -> TransformerConfig:
    """A config from data a file brought, every bound checked: types and ranges of every field (ConfigError),
    nesting depth, a known encoding, the seed, the vocabulary map against the encoding, the parameter count
    (CheckpointError upload_too_many_params) and the memory to build it (budget.MemoryBudgetError)."""
    if data is None:
        raise CheckpointError("upload_no_config")
    if isinstance(data, (str, bytes)):
        data = parse_json(data)
    if object_depth(data) > MAX_JSON_DEPTH:
        raise ConfigError("config_too_deep", depth=MAX_JSON_DEPTH)
    cfg = TransformerConfig.from_dict(data)
    if cfg.encoding not in ENCODINGS:
        raise ConfigError("encoding_unknown", name=cfg.encoding[:40], choices=", ".join(ENCODINGS))
    if not 0 <= cfg.seed <= SEED_MAX:
        raise ConfigError("config_range", field="seed", lo=0, hi=SEED_MAX)
    if cfg.vocab_map:
        try:
            n_vocab = load_encoding(cfg.encoding).n_vocab
        except EncodingUnavailable:
            n_vocab = None  # the pages will say the encoding is missing; the map is checked when it can be
        if n_vocab is not None and max(cfg.vocab_map) >= n_vocab:
            raise ConfigError("config_vocab_map")
    if param_count(cfg) > settings().max_train_params:
        raise CheckpointError("upload_too_many_params", limit=f"{settings().max_train_params:,}")
    if 2 * param_bytes(cfg) > budget.task_limit():  # the model, and the clean copy that is saved
        raise budget.MemoryBudgetError("memory_too_big", mb=budget.to_mb(2 * param_bytes(cfg)),
                                       limit=budget.to_mb(budget.task_limit()), setting=budget.SETTING_NAME)
    return cfg
