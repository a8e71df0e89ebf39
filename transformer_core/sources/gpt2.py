"""Load real GPT-2 weights (Hugging Face model.safetensors or pytorch_model.bin) into our decoder-only Transformer.

GPT-2 is pre-norm, which our AddNorm(norm_first=True) computes exactly: x + attn(ln_1(x)), then
x + mlp(ln_2(x)), a final ln_f, and logits against the tied token embedding. HF stores its linear layers
as Conv1D with weight (in, out), so each is transposed; c_attn holds W_q, W_k, W_v side by side.
"""
from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import torch

from ..errors import CheckpointError, ModelSourceError, reason_of
from ..model.config import TransformerConfig
from ..model.transformer import Transformer, build_model
from ..train.checkpoint import MAX_CHECKPOINT_BYTES, load_state_into
from . import ModelEntry, Places

HUB_REPO, HUB_FILE, HUB_CONFIG = "openai-community/gpt2", "model.safetensors", "config.json"  # GPT-2 small, 124 M
HEADS_BY_WIDTH = {768: 12, 1024: 16, 1280: 20, 1600: 25}  # gpt2, -medium, -large, -xl
TOP_KEYS = ("wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias")
LAYER_KEYS = tuple(f"{m}.{p}" for m in ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj")
                   for p in ("weight", "bias"))
BUFFERS = re.compile(r"h\.\d+\.attn\.(bias|masked_bias)$")  # causal-mask buffers, not weights


Gpt2LoadError = ModelSourceError  # the name notebooks know


def file_format(path: Path) -> str | None:
    """'safetensors', 'torch' (zip or legacy pickle), or None for anything else."""
    with path.open("rb") as f:
        head = f.read(9)
    if len(head) == 9 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") < path.stat().st_size:
        return "safetensors"
    if zipfile.is_zipfile(path) or head[:1] == b"\x80":
        return "torch"
    return None


def read_tensors(path: Path, max_bytes: int | None = None) -> dict[str, torch.Tensor]:
    """Tensors by name; pickles are read with weights_only=True, so code in a file is refused, never run.
    max_bytes: the largest file read (GPT-2's default 4 × MAX_CHECKPOINT_BYTES; a hub decoder passes its own)."""
    if not path.is_file():
        raise Gpt2LoadError("gpt2_no_file")
    if max_bytes is None and path.stat().st_size > 4 * MAX_CHECKPOINT_BYTES:
        raise Gpt2LoadError("gpt2_too_large", mb=4 * MAX_CHECKPOINT_BYTES // 2**20)
    if max_bytes is not None and path.stat().st_size > max_bytes:
        raise Gpt2LoadError("checkpoint_too_large", mb=max_bytes // 2**20)
    kind = file_format(path)
    if kind is None:
        raise Gpt2LoadError("gpt2_format")
    try:
        if kind == "safetensors":
            from safetensors.torch import load_file
            state = load_file(str(path), device="cpu")
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # UnpicklingError for code or objects, SafetensorError / RuntimeError if corrupt
        raise Gpt2LoadError("checkpoint_refused", reason=reason_of(exc)) from exc
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise Gpt2LoadError("checkpoint_not_tensors")
    return state


def strip_hf(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop the 'transformer.' prefix, the attention-mask buffers and a tied lm_head.weight."""
    out = {k.removeprefix("transformer."): v for k, v in state.items()}
    head = out.pop("lm_head.weight", None)
    if head is not None and "wte.weight" in out and not torch.equal(head, out["wte.weight"]):
        raise Gpt2LoadError("gpt2_untied")
    return {k: v for k, v in out.items() if not BUFFERS.fullmatch(k)}


def check_keys(state: dict[str, torch.Tensor]) -> int:
    """The number of layers; Gpt2LoadError names missing or unexpected keys."""
    layers = {int(m.group(1)) for k in state if (m := re.match(r"h\.(\d+)\.", k))}
    n_layers = max(layers) + 1 if layers else 0
    expected = [*TOP_KEYS, *(f"h.{i}.{k}" for i in range(n_layers) for k in LAYER_KEYS)]
    missing = [k for k in expected if k not in state]
    if missing or not n_layers:
        shown = ", ".join(missing[:8]) + (f" (+{len(missing) - 8})" if len(missing) > 8 else "")
        raise Gpt2LoadError("gpt2_keys", keys=shown or "h.N")
    unexpected = sorted(set(state) - set(expected))
    if unexpected:
        raise Gpt2LoadError("gpt2_keys", keys=", ".join(unexpected[:8]))
    return n_layers


def gpt2_config(state: dict[str, torch.Tensor], n_layers: int, n_heads: int | None = None) -> TransformerConfig:
    """A decoder-only config matching GPT-2, sizes read from the tensor shapes."""
    flat = [k for k in ("wte.weight", "wpe.weight", "h.0.mlp.c_fc.weight") if state[k].dim() != 2]
    if flat:
        raise Gpt2LoadError("gpt2_keys", keys=", ".join(flat))
    vocab, d = state["wte.weight"].shape
    heads = n_heads or HEADS_BY_WIDTH.get(d)
    if heads is None:
        raise Gpt2LoadError("gpt2_width", d=d, sizes=", ".join(map(str, sorted(HEADS_BY_WIDTH))))
    return TransformerConfig(
        arch="decoder_only", vocab_size=vocab, d_model=d, n_heads=heads, n_layers=n_layers,
        d_ffn=state["h.0.mlp.c_fc.weight"].shape[1], dropout=0.0, max_len=state["wpe.weight"].shape[0],
        encoding="r50k_base", positional="learned", final_norm=True, norm_first=True, activation="gelu_tanh",
        tie_embeddings=True, output_bias=False, layer_norm_eps=1e-5,
    )


def to_ours(state: dict[str, torch.Tensor], n_layers: int) -> dict[str, torch.Tensor]:
    """HF GPT-2 names and Conv1D (in, out) weights -> our names and nn.Linear (out, in) weights."""
    s = {k: v.float() for k, v in state.items()}
    out = {"decoder.embed.tok.weight": s["wte.weight"], "out.weight": s["wte.weight"],
           "decoder.embed.pos.weight": s["wpe.weight"],
           "decoder.norm.weight": s["ln_f.weight"], "decoder.norm.bias": s["ln_f.bias"]}
    for i in range(n_layers):
        h, ours = f"h.{i}.", f"decoder.layers.{i}."
        q, k, v = s[h + "attn.c_attn.weight"].t().chunk(3, dim=0)  # (3d, d) -> 3 × (d, d)
        qb, kb, vb = s[h + "attn.c_attn.bias"].chunk(3)
        pairs = {
            "addnorm1.ln.weight": s[h + "ln_1.weight"], "addnorm1.ln.bias": s[h + "ln_1.bias"],
            "self_attn.W_q.weight": q, "self_attn.W_k.weight": k, "self_attn.W_v.weight": v,
            "self_attn.W_q.bias": qb, "self_attn.W_k.bias": kb, "self_attn.W_v.bias": vb,
            "self_attn.W_o.weight": s[h + "attn.c_proj.weight"].t(), "self_attn.W_o.bias": s[h + "attn.c_proj.bias"],
            "addnorm2.ln.weight": s[h + "ln_2.weight"], "addnorm2.ln.bias": s[h + "ln_2.bias"],
            "ffn.linear1.weight": s[h + "mlp.c_fc.weight"].t(), "ffn.linear1.bias": s[h + "mlp.c_fc.bias"],
            "ffn.linear2.weight": s[h + "mlp.c_proj.weight"].t(), "ffn.linear2.bias": s[h + "mlp.c_proj.bias"],
        }
        out |= {ours + name: t.contiguous() for name, t in pairs.items()}
    return out


def heads_from_config(path: Path) -> int | None:
    """n_head from a Hugging Face config.json beside the weights, when there is a sane one."""
    config = path.with_name(HUB_CONFIG)
    try:
        if config.is_file() and config.stat().st_size < 100_000:
            heads = json.loads(config.read_text(encoding="utf-8")).get("n_head")
            return heads if isinstance(heads, int) and 1 <= heads <= 256 else None
    except (OSError, ValueError, AttributeError):
        pass
    return None


def load_gpt2(path: str | Path, *, n_heads: int | None = None, device=None) -> tuple[Transformer, dict]:
    """Our Transformer holding GPT-2's weights (eval mode), and a card about the file."""
    path = Path(path)
    state = strip_hf(read_tensors(path))
    n_layers = check_keys(state)
    cfg = gpt2_config(state, n_layers, n_heads or heads_from_config(path))
    model = build_model(cfg, "cpu")
    try:
        load_state_into(model, to_ours(state, n_layers))
    except CheckpointError as exc:
        raise Gpt2LoadError("gpt2_shapes") from exc
    card = {"name": "GPT-2", "arch": "decoder_only", "encoding": "r50k_base", "n_layers": n_layers,
            "d_model": cfg.d_model, "n_heads": cfg.n_heads, "vocab_size": cfg.vocab_size, "max_len": cfg.max_len}
    return model.to(device or "cpu").eval(), card


def hub_file(offline: bool = True, progress=None) -> Path | None:
    """GPT-2 small's weights (and its config.json) from the Hugging Face cache (HF_HOME), downloading them first
    unless `offline`. `progress` is a tqdm class (the app passes one that feeds its progress bar). None when
    offline and the cache does not have the file.
    """
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        hf_hub_download(HUB_REPO, HUB_CONFIG, local_files_only=offline)
        return Path(hf_hub_download(HUB_REPO, HUB_FILE, local_files_only=offline, tqdm_class=progress))
    except LocalEntryNotFoundError:
        if offline:
            return None
        raise


def weights_file(places: Places) -> Path | None:
    """The GPT-2 small weights this server has: the configured file, else the Hugging Face cache."""
    if places.gpt2_weights is not None and Path(places.gpt2_weights).is_file():
        return Path(places.gpt2_weights)
    try:
        return hub_file(offline=True)
    except Exception:  # noqa: BLE001 - a broken cache is "not there"
        return None


NAME = re.compile(r"[\w.-]{1,100}")


class Gpt2Source:
    """GPT-2 small (from the configured file or the Hugging Face cache), and GPT-2 files in the models folder."""

    kind = "gpt2"

    def entries(self, places: Places) -> list[ModelEntry]:
        # whether the weights are here is found out on load (the app then offers the download): asking the
        # Hugging Face cache on every listing cost a fresh server's first page 0.1 s
        card = {"arch": "decoder_only", "encoding": "r50k_base"}
        out = [ModelEntry("gpt2:small", "GPT-2 small", self.kind, card)]
        folder = places.models_dir
        if folder is not None and Path(folder).is_dir():
            for f in sorted(Path(folder).iterdir()):
                if f.suffix in (".safetensors", ".bin") and NAME.fullmatch(f.name):
                    out.append(ModelEntry(f"gpt2:file:{f.name}", f"GPT-2 · {f.name}", self.kind,
                                          {"arch": "decoder_only", "encoding": "r50k_base"}))
        return out

    def download(self, ref: str, progress=None) -> None:
        """Fetch GPT-2 small into the Hugging Face cache (the server's one download of it)."""
        if ref != "small":
            raise Gpt2LoadError("model_unknown")
        hub_file(offline=False, progress=progress)

    def load(self, ref: str, places: Places, device=None):
        if ref == "small":
            path = weights_file(places)
            if path is None:
                raise Gpt2LoadError("gpt2_not_downloaded")
            return load_gpt2(path, device=device)
        name = ref.removeprefix("file:")
        path = models_dir_file(places, name)
        return load_gpt2(path, device=device)

    def load_bytes(self, ref: str, places: Places) -> int:
        """The file 2.5 times: read; its transposed matrices (about 70% of it) copied into our layout; the model."""
        path = weights_file(places) if ref == "small" else models_dir_file(places, ref.removeprefix("file:"))
        return int(2.5 * path.stat().st_size) if path is not None else 0


def models_dir_file(places: Places, name: str) -> Path:
    """A file by name inside the configured models folder; one message whether it is missing or forbidden."""
    folder = places.models_dir
    if folder is None or not NAME.fullmatch(str(name)):
        raise Gpt2LoadError("gpt2_no_file")
    path = (Path(folder) / name).resolve()
    if path.parent != Path(folder).resolve() or not path.is_file():
        raise Gpt2LoadError("gpt2_no_file")
    return path


SOURCES = [Gpt2Source()]
