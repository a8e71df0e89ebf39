"""One config dataclass for every model, and the course's presets."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace

ARCHS = ("encoder_decoder", "decoder_only")
POSITIONALS = ("sinusoidal", "learned", "none")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh")


class ConfigError(ValueError):
    """A config that cannot build a model (the message says why)."""


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
    layer_norm_eps: float = 1e-5
    seed: int = 42
    # compacted vocabulary: model id -> real tokenizer id (empty = identity)
    vocab_map: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        self.validate()

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def validate(self) -> None:
        """Raise ConfigError with a clear message for impossible settings."""
        checks = [
            (self.arch in ARCHS, f"arch must be one of {ARCHS}, got {self.arch!r}"),
            (self.positional in POSITIONALS, f"positional must be one of {POSITIONALS}"),
            (self.activation in ACTIVATIONS, f"activation must be one of {ACTIVATIONS}"),
            (self.vocab_size >= 1, "vocab_size must be at least 1"),
            (self.d_model >= 2 and self.d_model % 2 == 0, "d_model must be an even number >= 2"),
            (self.n_heads >= 1, "n_heads must be at least 1"),
            (
                self.d_model % max(self.n_heads, 1) == 0,
                f"d_model ({self.d_model}) must be divisible by the number of heads "
                f"({self.n_heads}): each head gets d_model / n_heads dimensions",
            ),
            (self.n_layers >= 1, "n_layers must be at least 1"),
            (self.d_ffn >= 1, "d_ffn must be at least 1"),
            (0.0 <= self.dropout < 1.0, "dropout must be in [0, 1)"),
            (1 <= self.max_len <= 100_000, "max_len must be between 1 and 100000"),
            (not self.vocab_map or len(self.vocab_map) == self.vocab_size,
             "vocab_map must list one tokenizer id per model id"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)

    def to_json(self) -> str:
        data = asdict(self)
        data["vocab_map"] = list(self.vocab_map)
        return json.dumps(data, indent=2)

    @classmethod
    def from_dict(cls, data: dict) -> TransformerConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown config keys: {sorted(unknown)}")
        data = dict(data)
        data["vocab_map"] = tuple(data.get("vocab_map", ()))
        return cls(**data)

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
    # a tiny model for tests
    "tiny": TransformerConfig(d_model=16, n_heads=2, n_layers=2, d_ffn=32, max_len=64, dropout=0.0),
    "tiny-gpt": TransformerConfig(
        arch="decoder_only", d_model=16, n_heads=2, n_layers=2, d_ffn=32, max_len=64, dropout=0.0
    ),
}


def preset(name: str, **changes) -> TransformerConfig:
    """A preset config, optionally with fields changed (validated)."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return PRESETS[name].replace(**changes) if changes else PRESETS[name]
