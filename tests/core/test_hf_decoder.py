"""Today's decoders against Hugging Face transformers, offline: tiny random Llama and Qwen2 models saved with
save_pretrained, loaded by our loader; logits, every hidden state and every head's attention weights agree.
The tokenizer conversion is checked against `tokenizers` on thousands of strings for each family's pre-tokenizer."""
import json
import unicodedata

import pytest
import torch

from transformer_core.errors import EncodingUnavailable, ModelSourceError
from transformer_core.model.hooks import act_name
from transformer_core.model.trace import run_with_trace
from transformer_core.sources.hf_decoder import hf_config, load_hf_decoder
from transformer_core.text.hf_tokenizer import encoding_from_json

pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
from tokenizers import models  # noqa: E402

from harness.hf_models import CONFIGS, PRE_TOKENIZERS, save_tiny, strings, trained_tokenizer  # noqa: E402


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
