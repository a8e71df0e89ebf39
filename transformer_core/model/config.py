"""One config dataclass for every model, and the course's presets."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace

from ..errors import ConfigError

ARCHS = ("encoder_decoder", "decoder_only")
POSITIONALS = ("sinusoidal", "learned", "none", "rope")  # rope: q and k rotated inside attention, nothing added
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")
NORMS = ("layernorm", "rmsnorm")
FFNS = ("mlp", "gated")  # gated: down(act(gate(x)) ⊙ up(x)); with activation "silu" that is SwiGLU


@dataclass(frozen=True)
class TransformerConfig:
    arch: str = "encoder_decoder"
    vocab_size: int = 100277  # cl100k_base incl. special tokens (the course's 100256 leaves them out)
    d_model: int = 512
    n_heads: int = 8
    n_layers: int = 6
    d_ffn: int = 2048
    dropout: float = 0.1
    max_len: int = 1000
    encoding: str = "cl100k_base"
    positional: str = "sinusoidal"
    scale_embedding: bool = False  # multiply token embeddings by sqrt(d_model) (course doc 004)
    final_norm: bool = False  # a LayerNorm after each stack (course doc 004, GPT-2)
    norm_first: bool = False  # pre-norm (GPT-2) instead of the course's post-norm Add & Norm
    activation: str = "relu"
    tie_embeddings: bool = False  # output layer shares the token-embedding matrix (GPT-2)
    output_bias: bool = True
    layer_norm_eps: float = 1e-5  # also RMSNorm's eps
    # today's decoders (Llama, Qwen2): each a choice here, the course's value the default
    norm: str = "layernorm"  # rmsnorm: x / rms(x) · g, no mean subtracted, no bias
    ffn: str = "mlp"
    n_kv_heads: int = 0  # grouped-query attention: fewer K/V heads, each shared by a group of query heads; 0 = n_heads
    rope_theta: float = 10000.0  # RoPE's base: pair i turns by θ^(-2i/head_dim) radians per position
    qkv_bias: bool = True  # biases of W_q, W_k, W_v (Llama: none; Qwen2: these only)
    linear_bias: bool = True  # biases of W_o and the FFN's linears
    d_head: int = 0  # a head width set on its own (Qwen3-0.6B: 128, with d_model 1024, 16 heads); 0 = d_model / heads
    qk_norm: bool = False  # Qwen3: an RMSNorm over each head's q and k before RoPE, so q·k cannot grow without bound
    seed: int = 42
    embed_std: float = 0.0  # token embedding init N(0, embed_std²); 0 keeps PyTorch's N(0, 1)
    # compacted vocabulary: model id -> real tokenizer id (empty = identity; -1 = the unknown token)
    vocab_map: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        self.validate()

    @property
    def head_dim(self) -> int:
        return self.d_head or self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        """K/V heads: n_heads (the course's multi-head attention) or fewer (grouped-query attention)."""
        return self.n_kv_heads or self.n_heads

    def validate(self) -> None:
        """Raise ConfigError with a clear message for impossible settings."""
        checks = [
            (self.arch in ARCHS, "config_choice", {"field": "arch", "choices": ", ".join(ARCHS)}),
            (self.positional in POSITIONALS, "config_choice",
             {"field": "positional", "choices": ", ".join(POSITIONALS)}),
            (self.activation in ACTIVATIONS, "config_choice",
             {"field": "activation", "choices": ", ".join(ACTIVATIONS)}),
            (self.norm in NORMS, "config_choice", {"field": "norm", "choices": ", ".join(NORMS)}),
            (self.ffn in FFNS, "config_choice", {"field": "ffn", "choices": ", ".join(FFNS)}),
            (0 <= self.n_kv_heads <= self.n_heads and self.n_heads % max(self.n_kv_heads, 1) == 0, "config_kv_heads",
             {"heads": self.n_heads, "kv": self.n_kv_heads}),
            (1 < self.rope_theta <= 1e9, "config_range", {"field": "rope_theta", "lo": "> 1", "hi": "1e9"}),
            (self.positional != "rope" or self.head_dim % 2 == 0, "config_even", {"field": "head_dim"}),
            (1 <= self.vocab_size <= 1_000_000, "config_range", {"field": "vocab_size", "lo": 1, "hi": 1_000_000}),
            (2 <= self.d_model <= 16_384, "config_range", {"field": "d_model", "lo": 2, "hi": 16_384}),
            (self.d_model % 2 == 0, "config_even", {"field": "d_model"}),
            (1 <= self.n_heads <= 256, "config_range", {"field": "n_heads", "lo": 1, "hi": 256}),
            (0 <= self.d_head <= 1024, "config_range", {"field": "d_head", "lo": 0, "hi": 1024}),
            (self.d_head or self.d_model % max(self.n_heads, 1) == 0, "config_heads",
             {"d_model": self.d_model, "heads": self.n_heads}),
            (1 <= self.n_layers <= 256, "config_range", {"field": "n_layers", "lo": 1, "hi": 256}),
            (1 <= self.d_ffn <= 65_536, "config_range", {"field": "d_ffn", "lo": 1, "hi": 65_536}),
            (0 < self.layer_norm_eps < 1, "config_range", {"field": "layer_norm_eps", "lo": "> 0", "hi": "< 1"}),
            (0 <= self.embed_std <= 10, "config_range", {"field": "embed_std", "lo": 0, "hi": 10}),
            (0.0 <= self.dropout < 1.0, "config_range", {"field": "dropout", "lo": 0, "hi": "< 1"}),
            (1 <= self.max_len <= 100_000, "config_range", {"field": "max_len", "lo": 1, "hi": 100_000}),
            (not self.vocab_map or (len(self.vocab_map) == self.vocab_size and self.vocab_map.count(-1) <= 1),
             "config_vocab_map", {}),
        ]
        for ok, code, params in checks:
            if not ok:
                raise ConfigError(code, **params)

    def to_json(self) -> str:
        data = asdict(self)
        data["vocab_map"] = list(self.vocab_map)
        return json.dumps(data, indent=2)

    @classmethod
    def from_dict(cls, data: dict) -> TransformerConfig:
        """A config from JSON data, every field's type checked (a file from elsewhere may hold anything)."""
        if not isinstance(data, dict):
            raise ConfigError("config_not_object")
        types = {f.name: f.type for f in fields(cls)}
        unknown = set(data) - set(types)
        if unknown:
            raise ConfigError("config_unknown_keys", keys=", ".join(sorted(map(str, unknown))[:8]))
        clean = {}
        for name, value in data.items():
            kind = types[name]
            ok = {"int": isinstance(value, int) and not isinstance(value, bool),
                  "float": isinstance(value, (int, float)) and not isinstance(value, bool),
                  "bool": isinstance(value, bool), "str": isinstance(value, str) and len(value) <= 64,
                  }.get(kind, isinstance(value, list) and len(value) <= 1_000_000
                        and all(isinstance(i, int) and not isinstance(i, bool) and -1 <= i < 10_000_000 for i in value))
            if not ok:
                raise ConfigError("config_type", field=name)
            clean[name] = tuple(value) if name == "vocab_map" else value
        return cls(**clean)

    def replace(self, **changes) -> TransformerConfig:
        return replace(self, **changes)


# The course's systems. Vocabulary sizes are the encoding's full size (special tokens included).
PRESETS: dict[str, TransformerConfig] = {
    # course doc 000: translation Transformer, d_model 512, 8 heads, 6 layers, d_ffn 2048
    "course-base": TransformerConfig(),
    # course doc 004: same sizes, embeddings scaled by sqrt(d_model), final LayerNorm per stack
    "course-base-scaled": TransformerConfig(scale_embedding=True, final_norm=True),
    # course doc 003: the small GPT (batch 4, context 16, d_model 64, 4 heads, 8 layers)
    "course-gpt": TransformerConfig(
        arch="decoder_only", d_model=64, n_heads=4, n_layers=8, d_ffn=256, max_len=16
    ),
    # after the course: the small GPT with today's decoder parts (Llama / Qwen2): RoPE, RMSNorm, SwiGLU (d_ffn ⅔ of
    # 256 keeps the FFN's parameters), grouped-query attention (2 K/V heads for 4 query heads), no biases, pre-norm
    "course-gpt-modern": TransformerConfig(
        arch="decoder_only", d_model=64, n_heads=4, n_kv_heads=2, n_layers=8, d_ffn=172, max_len=64,
        positional="rope", norm="rmsnorm", ffn="gated", activation="silu", qkv_bias=False, linear_bias=False,
        norm_first=True, final_norm=True, tie_embeddings=True, output_bias=False,
    ),
    # the modern small GPT with Qwen3's two changes: QK-norm, and heads wider than d_model / n_heads (4 of 32 on 64)
    "course-gpt-qwen3": TransformerConfig(
        arch="decoder_only", d_model=64, n_heads=4, n_kv_heads=2, d_head=32, qk_norm=True, n_layers=8, d_ffn=172,
        max_len=64, positional="rope", norm="rmsnorm", ffn="gated", activation="silu", qkv_bias=False,
        linear_bias=False, norm_first=True, final_norm=True, tie_embeddings=True, output_bias=False,
    ),
    # a tiny model for tests
    "tiny": TransformerConfig(d_model=16, n_heads=2, n_layers=2, d_ffn=32, max_len=64, dropout=0.0),
    "tiny-gpt": TransformerConfig(
        arch="decoder_only", d_model=16, n_heads=2, n_layers=2, d_ffn=32, max_len=64, dropout=0.0
    ),
}


def preset(name: str, **changes) -> TransformerConfig:
    """A preset config, optionally with fields changed (validated)."""
    if name not in PRESETS:
        raise ConfigError("unknown_preset", name=str(name)[:40], choices=", ".join(sorted(PRESETS)))
    return PRESETS[name].replace(**changes) if changes else PRESETS[name]
