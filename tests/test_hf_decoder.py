"""Today's decoders against Hugging Face transformers, offline: tiny random Llama and Qwen2 models saved with
save_pretrained, loaded by our loader; logits, every hidden state and every head's attention weights agree.
The tokenizer conversion is checked against `tokenizers` on thousands of strings for each family's pre-tokenizer."""
import json
import random
import unicodedata

import pytest
import torch

from transformer_core.errors import EncodingUnavailable, ModelSourceError
from transformer_core.model.hooks import act_name
from transformer_core.model.trace import run_with_trace
from transformer_core.sources.hf_decoder import hf_config, load_hf_decoder
from transformer_core.text.hf_tokenizer import encoding_from_json

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

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
    pre, norm = PRE_TOKENIZERS[family]
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer, tok.decoder = pre(), decoders.ByteLevel()
    if norm:
        tok.normalizer = norm()
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(strings(2000, 0), trainer)
    return tok


@pytest.mark.parametrize("family", sorted(PRE_TOKENIZERS))
def test_tokenizer_json_converts_to_tiktoken_encoding_identical_ids(family):
    tok = trained_tokenizer(family)
    enc = encoding_from_json(json.loads(tok.to_str()), f"test-{family}")
    texts = strings(2500, 1)
    mismatched = [s for s in texts if tok.encode(s).ids != enc.encode_ordinary(s)]
    assert len(texts) >= 2000 and mismatched == []
    assert all(enc.decode(enc.encode_ordinary(s)) == unicodedata.normalize("NFC", s) if family == "qwen2" else s
               for s in texts[:300])
    special = tok.token_to_id("<|endoftext|>")
    assert enc.encode("a<|endoftext|>", allowed_special="all")[-1] == special


def test_tokenizer_json_that_is_not_byte_level_bpe_is_refused_with_a_message():
    tok = tokenizers.Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    with pytest.raises(EncodingUnavailable) as info:
        encoding_from_json(json.loads(tok.to_str()), "bad")
    assert info.value.code == "hf_tokenizer_unsupported"


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
}


def save_tiny(tmp_path, name: str):
    family, extra = CONFIGS[name]
    cls = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
           "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)}[family]
    torch.manual_seed(0)
    hf = cls[1](cls[0](**TINY, **extra)).eval()
    with torch.no_grad():  # random norms and biases, so a mix-up of any of them shows
        for n, p in hf.named_parameters():
            if n.endswith("norm.weight") or n.endswith(".bias"):
                p.copy_(1 + 0.3 * torch.randn_like(p) if n.endswith("weight") else 0.3 * torch.randn_like(p))
    hf.save_pretrained(tmp_path)
    tok = trained_tokenizer("qwen2" if family == "qwen2" else "smollm2")
    tok.save(str(tmp_path / "tokenizer.json"))
    return hf


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_loaded_model_matches_transformers_logits_hidden_states_and_attention(tmp_path, name):
    hf = save_tiny(tmp_path, name)
    model, card = load_hf_decoder(tmp_path, f"tiny-{name}")
    ids = torch.randint(0, 1200, (1, 23), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = hf(ids, output_hidden_states=True, output_attentions=True)
    logits, trace = run_with_trace(model, ids)
    L = model.cfg.n_layers
    assert (logits - ref.logits).abs().max() < 1e-4
    ours = [trace[act_name("embed", side="decoder")]]
    ours += [trace[act_name("addnorm_out", layer=i, block="dec_ffn", cross=False)] for i in range(L - 1)]
    ours += [trace[act_name("stack_out", side="decoder")]]  # HF's last hidden state is after the final norm
    assert len(ref.hidden_states) == L + 1
    for mine, theirs in zip(ours, ref.hidden_states, strict=True):
        assert (mine - theirs).abs().max() < 1e-4
    for i in range(L):
        stages = trace.attention("dec_self", i)
        assert stages.weights.shape == ref.attentions[i].shape  # (1, n_heads, T, T): every query head
        assert (stages.weights - ref.attentions[i]).abs().max() < 1e-4
        assert stages.k.size(1) == model.cfg.kv_heads and stages.group == model.cfg.n_heads // model.cfg.kv_heads
    assert card["n_kv_heads"] == model.cfg.kv_heads
    assert model.cfg.qkv_bias == (name.startswith("qwen2") or name == "llama-biases")


def test_hf_model_generates_with_the_kv_cache_like_a_full_forward(tmp_path):
    from transformer_core.model import kv_cache

    save_tiny(tmp_path, "qwen2-gqa-tied")
    model, _ = load_hf_decoder(tmp_path, "tiny-cache")
    ids = torch.randint(0, 1200, (1, 12), generator=torch.Generator().manual_seed(2))
    cache = kv_cache.start(model)
    stepped = torch.cat([kv_cache.step(model, cache, ids[:, :5])] + [kv_cache.step(model, cache, ids[:, i:i + 1])
                                                                    for i in range(5, 12)], dim=1)
    with torch.no_grad():
        full = model(ids)
    assert (stepped - full).abs().max() < 1e-4
    assert cache.layers[0]["self"]["k"].shape[1] == 2  # the cache holds the K/V heads only (GQA's saving)


def test_hf_configs_it_cannot_run_get_clear_errors():
    base = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 1,
            "intermediate_size": 64, "vocab_size": 100, "max_position_embeddings": 64, "hidden_act": "silu"}
    assert hf_config(base, "x").kv_heads == 4
    for bad, code in [({"model_type": "gemma"}, "hf_family"), ({"rope_scaling": {"rope_type": "yarn"}}, "hf_config"),
                      ({"hidden_size": "32"}, "hf_config"), ({"num_key_value_heads": 3}, "config_kv_heads"),
                      ({"hidden_act": "gelu"}, "hf_config")]:
        with pytest.raises(Exception) as info:
            hf_config({**base, **bad}, "x")
        assert getattr(info.value, "code", None) == code


def test_hf_folder_with_foreign_tensors_is_refused(tmp_path):
    from safetensors.torch import save_file

    save_tiny(tmp_path, "llama-gqa-tied")
    save_file({"model.embed_tokens.weight": torch.zeros(1200, 32), "vision.tower": torch.zeros(2)},
              str(tmp_path / "model.safetensors"))
    with pytest.raises(ModelSourceError) as info:
        load_hf_decoder(tmp_path, "tiny-bad")
    assert info.value.code == "hf_keys"
