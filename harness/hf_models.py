"""Tiny Hugging Face decoders for the loader's tests and the benches: byte-level BPE tokenizers trained on mixed text
with each family's own pre-tokenizer, and random Llama / Qwen2 / Qwen3 models written by save_pretrained.

Needs `tokenizers` (and `transformers` to write a model); a test that uses it skips without them first
(pytest.importorskip). Used by tests/core/test_hf_decoder.py, tests/service/test_gpt2_download.py and bench/modern.py.
"""
from __future__ import annotations

import random
import unicodedata

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
              r"|\s+(?!\S)|\s+")
PRE_TOKENIZERS = {  # each family's pre-tokenizer (and normalizer)
    "gpt2": (lambda: pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), None),
    "smollm2": (lambda: pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]),
                None),
    "qwen2": (lambda: pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
                                               pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
              normalizers.NFC),
}
SEEDS = ["The weather was nice, so we walked to the park after lunch.", "我今天去超市买了一些水果和牛奶。",
         "def f(x):\n    return x**2  # square\n", "Call 555-0123 or pay 1,234,567.89 on 2024-03-05!!",
         "  lots   of   spaces\t\ttabs\n\n\r\n",
         "emoji 😀👍🏽 family 👨‍👩‍👧 flags 🇨🇳", "naïve café résumé ²³ ٣٤ 五六 Ⅻ",
         "<b>html</b> &amp; http://x.y/z?q=1", "I'm sure they'll say it's 'fine' — won't they?",
         "ｆｕｌｌ　ｗｉｄｔｈ，全角"]


def strings(n: int, seed: int) -> list[str]:
    """Pieces of the seed texts glued at random, and random characters from scripts old enough that every Unicode
    table agrees on them (below U+0800, CJK, emoji)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        if rng.random() < 0.7:
            a, b = rng.choice(SEEDS), rng.choice(SEEDS)
            out.append(a[rng.randrange(len(a)):] + b[: rng.randrange(len(b) + 1)])
        else:
            blocks = [(32, 0x800), (0x4E00, 0x9FFF), (0x1F300, 0x1F64F), (0x30, 0x3A), (0x20, 0x21)]
            chars = (chr(rng.randrange(*rng.choice(blocks))) for _ in range(rng.randrange(1, 40)))
            out.append("".join(c for c in chars if unicodedata.category(c) not in ("Cn", "Cs")))
    return out


def trained_tokenizer(family: str):
    """A byte-level BPE of 1,200 tokens (and <|endoftext|>) trained on strings(2000, 0) with the family's
    pre-tokenizer (PRE_TOKENIZERS)."""
    pre, norm = PRE_TOKENIZERS[family]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer, tok.decoder = pre(), decoders.ByteLevel()
    if norm:
        tok.normalizer = norm()
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(strings(2000, 0), trainer)
    return tok


def hf_classes(family: str):
    """(config class, model class) of transformers for a family ("llama", "qwen2" or "qwen3")."""
    import transformers

    return {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
            "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
            "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM)}[family]


TINY = dict(vocab_size=1200, hidden_size=32, intermediate_size=56, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=128, hidden_act="silu", attn_implementation="eager")
CONFIGS = {
    "llama-gqa-tied": ("llama", dict(num_key_value_heads=2, tie_word_embeddings=True, rope_theta=10000.0)),
    "llama-mha-untied": ("llama", dict(num_key_value_heads=4, tie_word_embeddings=False, rope_theta=500000.0,
                                       rms_norm_eps=1e-5)),
    "llama-biases": ("llama", dict(num_key_value_heads=1, attention_bias=True, mlp_bias=True)),
    "qwen2-gqa-tied": ("qwen2", dict(num_key_value_heads=2, tie_word_embeddings=True, rope_theta=1e6,
                                     rms_norm_eps=1e-6)),
    "qwen2-untied": ("qwen2", dict(num_key_value_heads=4, tie_word_embeddings=False)),
    # Qwen3: QK-norm, and a head width of its own (4 heads of 16 on a width of 32, as Qwen3-0.6B's 16 of 128 on 1024)
    "qwen3-gqa-tied-wide-heads": ("qwen3", dict(num_key_value_heads=2, head_dim=16, tie_word_embeddings=True,
                                                rope_theta=1e6, rms_norm_eps=1e-6)),
    "qwen3-untied": ("qwen3", dict(num_key_value_heads=4, head_dim=8, tie_word_embeddings=False)),
}


def save_tiny(tmp_path, name: str):
    """A random model of CONFIGS[name] and its family's trained tokenizer, saved into tmp_path; the transformers
    model (eval mode)."""
    import torch

    family, extra = CONFIGS[name]
    cls = hf_classes(family)
    torch.manual_seed(0)
    hf = cls[1](cls[0](**TINY, **extra)).eval()
    with torch.no_grad():  # random norms and biases, so a mix-up of any of them shows
        for n, p in hf.named_parameters():
            if n.endswith("norm.weight") or n.endswith(".bias"):
                p.copy_(1 + 0.3 * torch.randn_like(p) if n.endswith("weight") else 0.3 * torch.randn_like(p))
    hf.save_pretrained(tmp_path)
    tok = trained_tokenizer("qwen2" if family.startswith("qwen") else "smollm2")
    tok.save(str(tmp_path / "tokenizer.json"))
    return hf

