"""transformer_core: a traceable, from-scratch Transformer that reproduces the course's systems (no Streamlit)."""
from .attention import MultiHeadAttention, attention
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .config import PRESETS, ConfigError, TransformerConfig, preset
from .device import device_name, pick_device
from .hooks import HookPoint, capture
from .layers import AddNorm, DecoderLayer, EncoderLayer, PositionalEncoding, PositionWiseFFN, sinusoid_table
from .masks import attention_mask, pad_batch, padding_mask, subsequent_mask
from .model import Transformer, build_model, param_counts
from .pipeline import InputError, prepare, trace_text
from .tokenizer import EncodingUnavailable, load_encoding, tokenize
from .trace import Trace, run, run_with_trace

__all__ = [
    "AddNorm", "CheckpointError", "ConfigError", "DecoderLayer", "EncoderLayer", "EncodingUnavailable",
    "HookPoint", "InputError", "MultiHeadAttention", "PRESETS", "PositionWiseFFN", "PositionalEncoding",
    "Trace", "Transformer", "TransformerConfig", "attention", "attention_mask", "build_model", "capture",
    "device_name", "load_checkpoint", "load_encoding", "pad_batch", "padding_mask", "param_counts",
    "pick_device", "preset", "prepare", "run", "run_with_trace", "save_checkpoint", "sinusoid_table",
    "subsequent_mask", "tokenize", "trace_text",
]
