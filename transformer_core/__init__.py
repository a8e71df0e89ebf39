"""transformer_core: a traceable, from-scratch Transformer that reproduces the course's systems (no Streamlit).

The notebook API: build or load a model, trace a text, read any intermediate by name, predict and generate.
"""
from .analysis.attention_steps import query_steps
from .analysis.next_token import (
    GREEDY,
    Sampling,
    distribution,
    generate,
    generate_batch,
    generate_text,
    next_token_probs,
    next_tokens,
)
from .errors import (
    CheckpointError,
    ConfigError,
    EncodingUnavailable,
    ExplorerError,
    InputError,
    ModelSourceError,
    SamplingError,
    TrainingError,
)
from .model.attention import MultiHeadAttention, attention
from .model.config import PRESETS, TransformerConfig, preset
from .model.device import device_name, pick_device
from .model.hooks import HookPoint, act_name, capture, intervene
from .model.layers import AddNorm, DecoderLayer, EncoderLayer, PositionWiseFFN
from .model.masks import attention_mask, pad_batch, padding_mask, subsequent_mask
from .model.positional import PositionalEncoding, sinusoid_table
from .model.trace import AttentionStages, Trace, run, run_with_trace
from .model.transformer import Transformer, build_model, param_counts
from .sources import Places, list_entries, load_model
from .sources.gpt2 import load_gpt2
from .text.inputs import prepare, token_labels, trace_text
from .text.tokenizer import load_encoding, tokenize
from .train.checkpoint import load_checkpoint, save_checkpoint
from .train.translation import in_domain, translate, translate_batch

__all__ = [
    "GREEDY", "PRESETS", "AddNorm", "AttentionStages", "CheckpointError", "ConfigError", "DecoderLayer",
    "EncoderLayer", "EncodingUnavailable", "ExplorerError", "HookPoint", "InputError", "ModelSourceError",
    "MultiHeadAttention", "Places", "PositionWiseFFN", "PositionalEncoding", "Sampling", "SamplingError", "Trace",
    "TrainingError", "Transformer", "TransformerConfig", "act_name", "attention", "attention_mask", "build_model",
    "capture", "device_name", "distribution", "generate", "generate_batch", "generate_text", "intervene",
    "list_entries",
    "load_checkpoint", "load_encoding", "load_gpt2", "load_model", "next_token_probs", "next_tokens", "pad_batch",
    "padding_mask", "param_counts", "pick_device", "preset", "prepare", "query_steps", "run", "run_with_trace",
    "save_checkpoint", "sinusoid_table", "subsequent_mask", "token_labels", "tokenize", "trace_text", "in_domain",
    "translate", "translate_batch",
]
