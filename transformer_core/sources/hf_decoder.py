"""Today's decoders from Hugging Face (Llama: SmolLM2; Qwen2: Qwen2.5) in our one Transformer, every stage traced.

A Llama block is our pre-norm decoder block with the config's modern choices: x + attn(rms_1(x)), then
x + mlp(rms_2(x)), a final RMSNorm; attention with RoPE and grouped-query K/V heads; the MLP is SwiGLU,
down(silu(gate(x)) ⊙ up(x)). Qwen2 is the same with biases on q, k and v. HF's nn.Linear weights are (out, in)
like ours, so nothing is transposed; only names change. The tokenizer.json beside the weights becomes a tiktoken
Encoding (text/hf_tokenizer.py) registered under the model's name.
"""
from __future__ import annotations

import json
import re
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

# Base models one click away (key, label, hub repository): small enough for a CPU, English and Chinese
HUB_MODELS = {
    "smollm2-135m": ("SmolLM2-135M", "HuggingFaceTB/SmolLM2-135M"),
    "qwen2.5-0.5b": ("Qwen2.5-0.5B", "Qwen/Qwen2.5-0.5B"),
}
FILES = ("config.json", "tokenizer.json", "model.safetensors")
FAMILIES = ("llama", "qwen2")
MAX_CONFIG_BYTES = 100_000
MAX_WEIGHTS_BYTES = 3 * 2**30  # Qwen2.5-0.5B's bfloat16 file is 0.99 GB; a 1.5 B model's would be about 3 GB


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
    """Our config for a Llama or Qwen2 config.json (sizes, norms, RoPE base, K/V heads, biases, tying)."""
    family = hf.get("model_type")
    if family not in FAMILIES:
        raise ModelSourceError("hf_family", family=str(family)[:30], families=", ".join(FAMILIES))
    d, heads = _int(hf, "hidden_size"), _int(hf, "num_attention_heads", hi=256)
    if hf.get("head_dim") not in (None, d // heads) or hf.get("use_sliding_window") or hf.get("hidden_act") != "silu":
        raise ModelSourceError("hf_config", field="head_dim / sliding window / hidden_act")
    if family == "llama" and bool(hf.get("attention_bias")) != bool(hf.get("mlp_bias")):
        raise ModelSourceError("hf_config", field="attention_bias / mlp_bias")
    qkv_bias = family == "qwen2" or bool(hf.get("attention_bias"))
    eps = hf.get("rms_norm_eps", 1e-6)
    return TransformerConfig(
        arch="decoder_only", vocab_size=_int(hf, "vocab_size"), d_model=d, n_heads=heads,
        n_kv_heads=_int(hf, "num_key_value_heads", hi=256) if hf.get("num_key_value_heads") is not None else heads,
        n_layers=_int(hf, "num_hidden_layers", hi=256),
        d_ffn=_int(hf, "intermediate_size"), dropout=0.0,
        max_len=min(_int(hf, "max_position_embeddings"), 100_000), encoding=encoding, positional="rope",
        rope_theta=_rope_theta(hf), norm="rmsnorm", layer_norm_eps=float(eps), ffn="gated", activation="silu",
        final_norm=True, norm_first=True, tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        output_bias=False, qkv_bias=qkv_bias, linear_bias=family == "llama" and bool(hf.get("mlp_bias")))


LAYER_NAMES = {  # HF name below model.layers.N. -> ours below decoder.layers.N.
    "input_layernorm.weight": "addnorm1.ln.weight", "post_attention_layernorm.weight": "addnorm2.ln.weight",
    **{f"self_attn.{x}_proj.{p}": f"self_attn.W_{x}.{p}" for x in "qkvo" for p in ("weight", "bias")},
    **{f"mlp.{hf}_proj.{p}": f"ffn.{ours}.{p}" for hf, ours in (("gate", "gate"), ("up", "linear1"),
                                                              ("down", "linear2")) for p in ("weight", "bias")},
}


def to_ours(state: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    """HF Llama / Qwen2 names -> ours, in float32; `state` is emptied as it goes (a 0.5 B model's bfloat16 copy is
    freed tensor by tensor, never held beside the whole float32 one). ModelSourceError names keys that do not
    belong."""
    out, unknown = {}, []
    for name in list(state):
        tensor = state.pop(name).float()
        if name == "model.embed_tokens.weight":
            out["decoder.embed.tok.weight"] = tensor
        elif name == "model.norm.weight":
            out["decoder.norm.weight"] = tensor
        elif name == "lm_head.weight":
            if not cfg.tie_embeddings:
                out["out.weight"] = tensor
        elif (m := re.fullmatch(r"model\.layers\.(\d+)\.(.+)", name)) and m.group(2) in LAYER_NAMES:
            out[f"decoder.layers.{m.group(1)}.{LAYER_NAMES[m.group(2)]}"] = tensor
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
    """Our Transformer holding a Llama / Qwen2 checkpoint folder (config.json, model.safetensors, tokenizer.json),
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
        load_state_into(model, to_ours(state, cfg), assign=True)
    except CheckpointError as exc:
        raise ModelSourceError("hf_shapes") from exc
    if any(t.is_meta for t in (*model.parameters(), *model.buffers())):
        raise ModelSourceError("hf_shapes")
    card = {"name": name, "arch": "decoder_only", "encoding": encoding, "family": hf["model_type"],
            "n_layers": cfg.n_layers, "d_model": cfg.d_model, "n_heads": cfg.n_heads, "n_kv_heads": cfg.kv_heads,
            "vocab_size": cfg.vocab_size, "max_len": cfg.max_len}
    return model.to(device or "cpu").eval(), card


def hub_folder(ref: str, offline: bool = True, progress=None) -> Path | None:
    """A hub model's folder in the Hugging Face cache (HF_HOME), downloading its three files first unless
    `offline`; None when offline and the cache lacks one. `progress`: a tqdm class for the weights' bar."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    repo = HUB_MODELS[ref][1]
    try:
        paths = [hf_hub_download(repo, f, local_files_only=offline, tqdm_class=progress) for f in FILES]
    except LocalEntryNotFoundError:
        if offline:
            return None
        raise
    return Path(paths[-1]).parent


class HfDecoderSource:
    """SmolLM2 and Qwen2.5 from the Hugging Face cache (one click downloads them; see service/downloads.py)."""

    kind = "hf"

    def entries(self, places: Places) -> list[ModelEntry]:
        return [ModelEntry(f"hf:{ref}", label, self.kind, {"arch": "decoder_only", "encoding": f"hf-{ref}"})
                for ref, (label, _) in HUB_MODELS.items()]

    def load(self, ref: str, places: Places, device=None):
        if ref not in HUB_MODELS:
            raise ModelSourceError("model_unknown")
        try:
            folder = hub_folder(ref, offline=True)
        except (OSError, ExplorerError, ValueError):
            folder = None  # a broken cache is "not there"
        if folder is None:
            raise ModelSourceError("hf_not_downloaded", model=HUB_MODELS[ref][0])
        return load_hf_decoder(folder, ref, device)

    def load_bytes(self, ref: str, places: Places) -> int:
        """The bfloat16 file 2.5 times: read whole (1×), then turned into the float32 model (2×) tensor by tensor."""
        folder = hub_folder(ref, offline=True) if ref in HUB_MODELS else None
        return int(2.5 * (folder / "model.safetensors").stat().st_size) if folder is not None else 0

    def download(self, ref: str, progress=None) -> None:
        """Fetch the model's files into the Hugging Face cache (the server's one download of it)."""
        if ref not in HUB_MODELS:
            raise ModelSourceError("model_unknown")
        hub_folder(ref, offline=False, progress=progress)


SOURCES = [HfDecoderSource()]
