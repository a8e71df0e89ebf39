"""Today's decoders against Hugging Face transformers, offline: tiny random Llama, Qwen2 and Qwen3 models saved with
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
        assert (stages.weights - ref.attentions[i]).abs().max() < 1e-5
        assert stages.k.size(1) == model.cfg.kv_heads and stages.group == model.cfg.n_heads // model.cfg.kv_heads
    assert card["n_kv_heads"] == model.cfg.kv_heads
    assert model.cfg.qkv_bias == (name.startswith("qwen2") or name == "llama-biases")
    assert model.cfg.qk_norm == name.startswith("qwen3") and card["head_dim"] == CONFIGS[name][1].get("head_dim", 8)
    if model.cfg.qk_norm:  # the q/k norms' hook points: before (q, k) and after (q_normed, k_normed), before RoPE
        stages = trace.attention("dec_self", 0)
        attn = hf.model.layers[0].self_attn
        for x, ours_in, ours_out, norm in (("q", stages.q, stages.q_normed, attn.q_norm),
                                           ("k", stages.k, stages.k_normed, attn.k_norm)):
            with torch.no_grad():
                assert (norm(ours_in) - ours_out).abs().max() < 1e-5, x
                rms = (ours_out / norm.weight).pow(2).mean(-1).sqrt()  # each head's q and k at rms 1 before the gain
            assert (rms - 1).abs().max() < 1e-3, x


@pytest.mark.parametrize("name", ["qwen2-gqa-tied", "qwen3-gqa-tied-wide-heads", "qwen3-untied"])
def test_hf_model_generates_with_the_kv_cache_like_a_full_forward(tmp_path, name):
    from transformer_core.model import kv_cache

    save_tiny(tmp_path, name)
    model, _ = load_hf_decoder(tmp_path, f"tiny-cache-{name}")
    ids = torch.randint(0, 1200, (1, 12), generator=torch.Generator().manual_seed(2))
    cache = kv_cache.start(model)
    stepped = torch.cat([kv_cache.step(model, cache, ids[:, :5])] + [kv_cache.step(model, cache, ids[:, i:i + 1])
                                                                    for i in range(5, 12)], dim=1)
    with torch.no_grad():
        full = model(ids)
    assert (stepped - full).abs().max() < 1e-4
    assert cache.layers[0]["self"]["k"].shape[1] == model.cfg.kv_heads  # the cache holds the K/V heads only (GQA)


@pytest.mark.parametrize("name", ["qwen3-gqa-tied-wide-heads", "qwen3-untied"])
def test_qwen3_greedy_generation_equals_transformers_generate(tmp_path, name):
    from transformer_core.analysis.next_token import generate

    hf = save_tiny(tmp_path, name)
    model, _ = load_hf_decoder(tmp_path, f"tiny-gen-{name}")
    ids = torch.randint(0, 1200, (1, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        theirs = hf.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0)[0, 9:].tolist()
    ours = generate(model, ids[0].tolist(), 12, stop_at_end=False)  # greedy, through the KV cache
    assert ours == theirs


def test_hf_configs_it_cannot_run_get_clear_errors():
    base = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 1,
            "intermediate_size": 64, "vocab_size": 100, "max_position_embeddings": 64, "hidden_act": "silu"}
    assert hf_config(base, "x").kv_heads == 4
    qwen3 = hf_config({**base, "model_type": "qwen3", "head_dim": 16, "num_key_value_heads": 2}, "x")
    assert (qwen3.head_dim, qwen3.d_head, qwen3.qk_norm, qwen3.qkv_bias, qwen3.linear_bias) == (16, 16, True, False,
                                                                                               False)
    for bad, code in [({"model_type": "gemma"}, "hf_family"), ({"rope_scaling": {"rope_type": "yarn"}}, "hf_config"),
                      ({"hidden_size": "32"}, "hf_config"), ({"num_key_value_heads": 3}, "config_kv_heads"),
                      ({"hidden_act": "gelu"}, "hf_config"), ({"use_sliding_window": True}, "hf_config"),
                      ({"model_type": "qwen3", "attention_bias": True}, "hf_config"),
                      ({"model_type": "qwen3", "layer_types": ["sliding_attention"]}, "hf_config"),
                      ({"model_type": "qwen3", "head_dim": 0}, "hf_config")]:
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


def test_qk_norm_view_recomputes_what_transformers_gives_with_and_without_the_norms(tmp_path):
    """The Attention page's QK-norm view on layer 0 of a tiny Qwen3: the weights "with" are transformers' own, and
    the weights "without" are transformers' with its q_norm and k_norm replaced by identities (layer 0 reads the
    embeddings, so nothing below it changes); the lengths are the hooked q and k's."""
    from torch import nn

    from transformer_core.analysis.qk_norm import qk_norm_effect

    hf = save_tiny(tmp_path, "qwen3-gqa-tied-wide-heads")
    model, _ = load_hf_decoder(tmp_path, "tiny-qkn")
    ids = torch.randint(0, 1200, (1, 17), generator=torch.Generator().manual_seed(4))
    _, trace = run_with_trace(model, ids)
    stages = trace.attention("dec_self", 0)
    with torch.no_grad():
        with_norms = hf(ids, output_attentions=True).attentions[0][0]  # (nh, T, T)
        attn = hf.model.layers[0].self_attn
        attn.q_norm, attn.k_norm = nn.Identity(), nn.Identity()
        without = hf(ids, output_attentions=True).attentions[0][0]
    for head in range(model.cfg.n_heads):
        fx = qk_norm_effect(model, stages, head)
        assert abs(fx.weights_with - with_norms[head].numpy()).max() < 1e-5
        assert abs(fx.weights_without - without[head].numpy()).max() < 1e-5
        assert abs(fx.q_before - stages.q[0, head].norm(dim=-1).numpy()).max() < 1e-6
        assert abs(fx.k_after - stages.k_normed[0, stages.kv_head(head)].norm(dim=-1).numpy()).max() < 1e-6
    assert abs(with_norms - without).max() > 1e-3  # the norms change the maps: the check above can tell them apart
    assert qk_norm_effect(model, trace.attention("dec_self", 1), 0) is not None
