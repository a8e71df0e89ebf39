"""Today's decoders from Hugging Face in our one Transformer, every stage traced: the machinery every family shares,
and the first two families (Llama: SmolLM2; Qwen2: Qwen2.5). A further family is one module of this package that
defines `FAMILY` (qwen3.py): what its config.json sets beyond the shared fields, its extra tensor names, its hub
models; this module finds it.

A Llama block is our pre-norm decoder block with the config's modern choices: x + attn(rms_1(x)), then
x + mlp(rms_2(x)), a final RMSNorm; attention with RoPE and grouped-query K/V heads; the MLP is SwiGLU,
down(silu(gate(x)) ⊙ up(x)). Qwen2 is the same with biases on q, k and v. HF's nn.Linear weights are (out, in)
like ours, so nothing is transposed; only names change. The tokenizer.json beside the weights becomes a tiktoken
Encoding (text/hf_tokenizer.py) registered under the model's name.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import torch

from ..errors import CheckpointError, ExplorerError, ModelSourceError
from ..model.config import TransformerConfig
from ..model.transformer import Transformer
from ..text.hf_tokenizer import load_tokenizer_json
from ..text.tokenizer import register_encoding
from ..train.checkpoint import load_state_into
from . import ModelEntry, Places
from .gpt2 import read_tensors

FILES = ("config.json", "tokenizer.json", "model.safetensors")
MAX_CONFIG_BYTES = 100_000
MAX_WEIGHTS_BYTES = 3 * 2**30  # Qwen2.5-0.5B's bfloat16 file is 0.99 GB; a 1.5 B model's would be about 3 GB


@dataclass(frozen=True)
class Family:
    """A Hugging Face decoder family: `fields(config.json)` gives the TransformerConfig fields it sets beyond the
    shared ones (or raises ModelSourceError for what it cannot represent); `tensors` maps its extra tensor names
    below model.layers.N. to ours; `hub`: its models one click away, key -> (label, hub repository); `published`:
    the config.json values of its first hub model that set its parts and its cost (the Model page's table of parts
    and bench/modern.py read them, with no download)."""

    model_type: str
    fields: Callable[[dict], dict]
    tensors: dict[str, str] = field(default_factory=dict)
    hub: dict[str, tuple[str, str]] = field(default_factory=dict)
    published: dict = field(default_factory=dict)


def _llama(hf: dict) -> dict:
    if bool(hf.get("attention_bias")) != bool(hf.get("mlp_bias")):
        raise ModelSourceError("hf_config", field="attention_bias / mlp_bias")
    return {"qkv_bias": bool(hf.get("attention_bias")), "linear_bias": bool(hf.get("mlp_bias"))}


LLAMA = Family("llama", _llama, hub={"smollm2-135m": ("SmolLM2-135M", "HuggingFaceTB/SmolLM2-135M")},
               published=dict(hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3,
                              num_hidden_layers=30, vocab_size=49152, max_position_embeddings=8192,
                              rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, hidden_act="silu"))
QWEN2 = Family("qwen2", lambda hf: {"qkv_bias": True, "linear_bias": False},
               hub={"qwen2.5-0.5b": ("Qwen2.5-0.5B", "Qwen/Qwen2.5-0.5B")},
               published=dict(hidden_size=896, intermediate_size=4864, num_attention_heads=14, num_key_value_heads=2,
                              num_hidden_layers=24, vocab_size=151936, max_position_embeddings=32768,
                              rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                              use_sliding_window=False, hidden_act="silu"))


@lru_cache(maxsize=1)
def families() -> dict[str, Family]:
    """model_type -> Family: Llama and Qwen2, then every module of this package that defines FAMILY."""
    from . import modules

    found = {f.model_type: f for f in (LLAMA, QWEN2)}
    for family in (getattr(m, "FAMILY", None) for m in modules()):
        if isinstance(family, Family):
            found[family.model_type] = family
    return found


def hub_models() -> dict[str, tuple[str, str]]:
    """Every family's hub models: key -> (label, repository), smallest families first."""
    return {ref: v for f in families().values() for ref, v in f.hub.items()}


def published_configs() -> dict[str, TransformerConfig]:
    """Each family's first hub model as our config, from its published config.json (label -> config)."""
    out = {}
    for f in families().values():
        if f.hub and f.published:
            ref, (label, _) = next(iter(f.hub.items()))
            out[label] = hf_config({"model_type": f.model_type, **f.published}, f"hf-{ref}")
    return out


def _int(cfg: dict, key: str, lo: int = 1, hi: int = 10**7) -> int:
    value = cfg.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ModelSourceError("hf_config", field=key)
    return value


def _rope_theta(hf: dict) -> float:
    """RoPE's base from either spelling (transformers 4: rope_theta; 5: rope_parameters); plain RoPE only."""
    params = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    kind = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    if kind != "default":
        raise ModelSourceError("hf_config", field=f"rope_type {str(kind)[:20]}")
    theta = params.get("rope_theta", hf.get("rope_theta", 10000.0))
    if not isinstance(theta, (int, float)) or isinstance(theta, bool):
        raise ModelSourceError("hf_config", field="rope_theta")
    return float(theta)


def hf_config(hf: dict, encoding: str) -> TransformerConfig:
    """Our config for a config.json of a known family (sizes, norms, RoPE base, K/V heads, head width, biases,
    tying); what the family cannot represent (sliding windows, RoPE scaling, other activations) is refused."""
    family = families().get(hf.get("model_type"))
    if family is None:
        raise ModelSourceError("hf_family", family=str(hf.get("model_type"))[:30], families=", ".join(families()))
    d, heads = _int(hf, "hidden_size"), _int(hf, "num_attention_heads", hi=256)
    head_dim = _int(hf, "head_dim", hi=1024) if hf.get("head_dim") is not None else d // heads
    if hf.get("use_sliding_window") or hf.get("hidden_act") != "silu":
        raise ModelSourceError("hf_config", field="sliding window / hidden_act")
    eps = hf.get("rms_norm_eps", 1e-6)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not 0 < eps < 1:
        raise ModelSourceError("hf_config", field="rms_norm_eps")
    return TransformerConfig(**{
        "arch": "decoder_only", "vocab_size": _int(hf, "vocab_size"), "d_model": d, "n_heads": heads,
        "n_kv_heads": _int(hf, "num_key_value_heads", hi=256) if hf.get("num_key_value_heads") is not None else heads,
        "n_layers": _int(hf, "num_hidden_layers", hi=256), "d_head": 0 if head_dim * heads == d else head_dim,
        "d_ffn": _int(hf, "intermediate_size"), "dropout": 0.0,
        "max_len": min(_int(hf, "max_position_embeddings"), 100_000), "encoding": encoding, "positional": "rope",
        "rope_theta": _rope_theta(hf), "norm": "rmsnorm", "layer_norm_eps": float(eps), "ffn": "gated",
        "activation": "silu", "final_norm": True, "norm_first": True,
        "tie_embeddings": bool(hf.get("tie_word_embeddings", False)), "output_bias": False, **family.fields(hf)})


LAYER_NAMES = {  # HF name below model.layers.N. -> ours below decoder.layers.N.
    "input_layernorm.weight": "addnorm1.ln.weight", "post_attention_layernorm.weight": "addnorm2.ln.weight",
    **{f"self_attn.{x}_proj.{p}": f"self_attn.W_{x}.{p}" for x in "qkvo" for p in ("weight", "bias")},
    **{f"mlp.{hf}_proj.{p}": f"ffn.{ours}.{p}" for hf, ours in (("gate", "gate"), ("up", "linear1"),
                                                              ("down", "linear2")) for p in ("weight", "bias")},
}


def to_ours(state: dict[str, torch.Tensor], cfg: TransformerConfig, family: Family = LLAMA
            ) -> dict[str, torch.Tensor]:
    """HF names -> ours, in float32; `state` is emptied as it goes (a 0.5 B model's bfloat16 copy is freed tensor by
    tensor, never held beside the whole float32 one). ModelSourceError names keys that do not belong."""
    out, unknown, names = {}, [], {**LAYER_NAMES, **family.tensors}
    for name in list(state):
        tensor = state.pop(name).float()
        if name == "model.embed_tokens.weight":
            out["decoder.embed.tok.weight"] = tensor
        elif name == "model.norm.weight":
            out["decoder.norm.weight"] = tensor
        elif name == "lm_head.weight":
            if not cfg.tie_embeddings:
                out["out.weight"] = tensor
        elif (m := re.fullmatch(r"model\.layers\.(\d+)\.(.+)", name)) and m.group(2) in names:
            out[f"decoder.layers.{m.group(1)}.{names[m.group(2)]}"] = tensor
        elif not name.endswith("rotary_emb.inv_freq"):  # older files store RoPE's frequencies: recomputed here
            unknown.append(name)
    if unknown:
        raise ModelSourceError("hf_keys", keys=", ".join(unknown[:8]))
    return {k: v.contiguous() for k, v in out.items()}


def read_config(folder: Path) -> dict:
    path = folder / "config.json"
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ModelSourceError("hf_config", field="config.json")
        hf = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelSourceError("hf_config", field="config.json") from exc
    if not isinstance(hf, dict):
        raise ModelSourceError("hf_config", field="config.json")
    return hf


def load_hf_decoder(folder: str | Path, name: str, device=None) -> tuple[Transformer, dict]:
    """Our Transformer holding a checkpoint folder of a known family (config.json, model.safetensors, tokenizer.json),
    in eval mode, with its tokenizer registered as encoding "hf-<name>"; and a card."""
    folder = Path(folder)
    hf = read_config(folder)
    encoding = f"hf-{name}"[:64]
    register_encoding(load_tokenizer_json(folder / "tokenizer.json", encoding))
    cfg = hf_config(hf, encoding)
    state = read_tensors(folder / "model.safetensors", MAX_WEIGHTS_BYTES)
    with torch.device("meta"):  # no weights allocated: the checkpoint's tensors become the model's (assign)
        model = Transformer(cfg)
    try:
        load_state_into(model, to_ours(state, cfg, families()[hf["model_type"]]), assign=True)
    except CheckpointError as exc:
        raise ModelSourceError("hf_shapes") from exc
    if any(t.is_meta for t in (*model.parameters(), *model.buffers())):
        raise ModelSourceError("hf_shapes")
    card = {"name": name, "arch": "decoder_only", "encoding": encoding, "family": hf["model_type"],
            "n_layers": cfg.n_layers, "d_model": cfg.d_model, "n_heads": cfg.n_heads, "n_kv_heads": cfg.kv_heads,
            "head_dim": cfg.head_dim, "qk_norm": cfg.qk_norm,
            "vocab_size": cfg.vocab_size, "max_len": cfg.max_len}
    return model.to(device or "cpu").eval(), card


def hub_folder(ref: str, offline: bool = True, progress=None) -> Path | None:
    """A hub model's folder in the Hugging Face cache (HF_HOME), downloading its three files first unless
    `offline`; None when offline and the cache lacks one. `progress`: a tqdm class for the weights' bar."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    repo = hub_models()[ref][1]
    try:
        paths = [hf_hub_download(repo, f, local_files_only=offline, tqdm_class=progress) for f in FILES]
    except LocalEntryNotFoundError:
        if offline:
            return None
        raise
    return Path(paths[-1]).parent


class HfDecoderSource:
    """Every family's hub models (SmolLM2, Qwen2.5, Qwen3) from the Hugging Face cache (one click downloads them;
    see service/downloads.py)."""

    kind = "hf"

    def entries(self, places: Places) -> list[ModelEntry]:
        return [ModelEntry(f"hf:{ref}", label, self.kind, {"arch": "decoder_only", "encoding": f"hf-{ref}"})
                for ref, (label, _) in hub_models().items()]

    def load(self, ref: str, places: Places, device=None):
        if ref not in hub_models():
            raise ModelSourceError("model_unknown")
        try:
            folder = hub_folder(ref, offline=True)
        except (OSError, ExplorerError, ValueError):
            folder = None  # a broken cache is "not there"
        if folder is None:
            raise ModelSourceError("hf_not_downloaded", model=hub_models()[ref][0])
        return load_hf_decoder(folder, ref, device)

    def load_bytes(self, ref: str, places: Places) -> int:
        """The bfloat16 file 2.5 times: read whole (1×), then turned into the float32 model (2×) tensor by tensor."""
        folder = hub_folder(ref, offline=True) if ref in hub_models() else None
        return int(2.5 * (folder / "model.safetensors").stat().st_size) if folder is not None else 0

    def download(self, ref: str, progress=None) -> None:
        """Fetch the model's files into the Hugging Face cache (the server's one download of it)."""
        if ref not in hub_models():
            raise ModelSourceError("model_unknown")
        hub_folder(ref, offline=False, progress=progress)


SOURCES = [HfDecoderSource()]
