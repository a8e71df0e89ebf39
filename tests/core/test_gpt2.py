"""GPT-2 loading: HF key mapping in both file formats, logits equal to a plain re-implementation, clear refusals."""
import math
import os
import pickle

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from transformer_core.sources import Places, load_model
from transformer_core.sources.gpt2 import Gpt2LoadError, load_gpt2

D, LAYERS, HEADS, VOCAB, CTX = 64, 2, 4, 500, 32


def hf_state(seed: int = 0) -> dict[str, torch.Tensor]:
    """A small random GPT-2 state dict with Hugging Face names and Conv1D (in, out) weights."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=0.2):
        return torch.randn(*shape, generator=g) * scale

    s = {"wte.weight": r(VOCAB, D), "wpe.weight": r(CTX, D), "ln_f.weight": 1 + r(D), "ln_f.bias": r(D)}
    for i in range(LAYERS):
        h = f"h.{i}."
        s |= {h + "ln_1.weight": 1 + r(D), h + "ln_1.bias": r(D), h + "ln_2.weight": 1 + r(D), h + "ln_2.bias": r(D),
              h + "attn.c_attn.weight": r(D, 3 * D), h + "attn.c_attn.bias": r(3 * D),
              h + "attn.c_proj.weight": r(D, D), h + "attn.c_proj.bias": r(D),
              h + "mlp.c_fc.weight": r(D, 4 * D), h + "mlp.c_fc.bias": r(4 * D),
              h + "mlp.c_proj.weight": r(4 * D, D), h + "mlp.c_proj.bias": r(D),
              h + "attn.bias": torch.ones(1, 1, CTX, CTX).tril(), h + "attn.masked_bias": torch.tensor(-1e4)}
    return s


def reference_gpt2(s: dict[str, torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
    """GPT-2's forward written directly on the HF tensors (independent of transformer_core)."""
    T = ids.size(1)
    x = s["wte.weight"][ids] + s["wpe.weight"][:T]  # (B, T, D)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(LAYERS):
        p = {k.removeprefix(f"h.{i}."): v for k, v in s.items() if k.startswith(f"h.{i}.")}.__getitem__
        a = F.layer_norm(x, (D,), p("ln_1.weight"), p("ln_1.bias"), 1e-5)
        q, k, v = (a @ p("attn.c_attn.weight") + p("attn.c_attn.bias")).split(D, dim=-1)
        q, k, v = (t.view(1, T, HEADS, D // HEADS).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        att = (q @ k.transpose(-2, -1) / math.sqrt(D // HEADS)).masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(1, T, D)
        x = x + y @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        m = F.layer_norm(x, (D,), p("ln_2.weight"), p("ln_2.bias"), 1e-5)
        x = x + F.gelu(m @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"), approximate="tanh") @ p("mlp.c_proj.weight") \
            + p("mlp.c_proj.bias")
    x = F.layer_norm(x, (D,), s["ln_f.weight"], s["ln_f.bias"], 1e-5)
    return x @ s["wte.weight"].T  # (B, T, vocab)


IDS = torch.tensor([[5, 17, 3, 499, 42, 42, 0, 250, 7, 11, 13, 1]])


def test_safetensors_file_gives_gpt2_logits(tmp_path):
    s = hf_state()
    save_file(s, str(tmp_path / "model.safetensors"))
    model, meta = load_gpt2(tmp_path / "model.safetensors", n_heads=HEADS)
    assert (meta["n_layers"], meta["d_model"], meta["vocab_size"], meta["max_len"]) == (LAYERS, D, VOCAB, CTX)
    with torch.no_grad():
        torch.testing.assert_close(model(IDS), reference_gpt2(s, IDS), atol=1e-4, rtol=1e-4)


def test_pytorch_bin_with_transformer_prefix_and_tied_lm_head_gives_gpt2_logits(tmp_path):
    s = hf_state(1)
    full = {f"transformer.{k}": v for k, v in s.items()} | {"lm_head.weight": s["wte.weight"].clone()}
    torch.save(full, tmp_path / "pytorch_model.bin")
    model, _ = load_gpt2(tmp_path / "pytorch_model.bin", n_heads=HEADS)
    with torch.no_grad():
        torch.testing.assert_close(model(IDS), reference_gpt2(s, IDS), atol=1e-4, rtol=1e-4)


def test_config_matches_gpt2(tmp_path):
    save_file(hf_state(), str(tmp_path / "m.safetensors"))
    cfg = load_gpt2(tmp_path / "m.safetensors", n_heads=HEADS)[0].cfg
    assert (cfg.arch, cfg.positional, cfg.norm_first, cfg.final_norm, cfg.activation) == (
        "decoder_only", "learned", True, True, "gelu_tanh")
    assert cfg.tie_embeddings and not cfg.output_bias and cfg.encoding == "r50k_base" and cfg.d_ffn == 4 * D


def test_the_configured_file_is_gpt2_small(tmp_path):
    save_file(hf_state(), str(tmp_path / "m.safetensors"))
    places = Places(gpt2_weights=tmp_path / "m.safetensors")
    with pytest.raises(Gpt2LoadError, match="pass n_heads|not a GPT-2 size"):  # width 64 is no GPT-2 size
        load_model("gpt2:small", places)


def test_without_a_file_or_a_cached_download_gpt2_small_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(Gpt2LoadError, match="download it once") as info:
        load_model("gpt2:small", Places(gpt2_weights=None))
    assert info.value.code == "gpt2_not_downloaded"


def test_models_folder_files_open_by_name_only(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    secret = tmp_path / "secret.safetensors"
    save_file(hf_state(), str(secret))
    places = Places(models_dir=folder)
    errors = []
    for name in ("missing.safetensors", "../secret.safetensors", str(secret), "..", ""):
        with pytest.raises(Gpt2LoadError) as info:
            load_model(f"gpt2:file:{name}", places)
        errors.append(str(info.value))
    assert len(set(errors)) == 1  # the same message whether a file is missing or forbidden


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(Gpt2LoadError, match="No GPT-2 weights file"):
        load_gpt2(tmp_path / "nope.safetensors")


def test_wrong_format_is_a_clear_error(tmp_path):
    (tmp_path / "weights.txt").write_text("these are not weights")
    with pytest.raises(Gpt2LoadError, match="neither a safetensors file nor a PyTorch weights file"):
        load_gpt2(tmp_path / "weights.txt")


def test_width_outside_the_gpt2_family_needs_n_heads(tmp_path):
    save_file(hf_state(), str(tmp_path / "m.safetensors"))
    with pytest.raises(Gpt2LoadError, match="not a GPT-2 size"):
        load_gpt2(tmp_path / "m.safetensors")


def test_not_gpt2_names_the_missing_keys(tmp_path):
    s = hf_state()
    del s["h.1.mlp.c_fc.weight"], s["ln_f.bias"]
    save_file(s, str(tmp_path / "m.safetensors"))
    with pytest.raises(Gpt2LoadError, match=r"ln_f\.bias, h\.1\.mlp\.c_fc\.weight"):
        load_gpt2(tmp_path / "m.safetensors", n_heads=HEADS)


def test_another_models_weights_are_not_gpt2(tmp_path):
    save_file({"encoder.weight": torch.zeros(3, 3)}, str(tmp_path / "m.safetensors"))
    with pytest.raises(Gpt2LoadError, match="not a GPT-2 file .tensor names: wte.weight"):
        load_gpt2(tmp_path / "m.safetensors")


def test_untied_lm_head_is_refused(tmp_path):
    s = hf_state() | {"lm_head.weight": torch.zeros(VOCAB, D)}
    torch.save(s, tmp_path / "m.bin")
    with pytest.raises(Gpt2LoadError, match="lm_head.weight differs"):
        load_gpt2(tmp_path / "m.bin", n_heads=HEADS)


def test_non_tensor_values_are_refused(tmp_path):
    torch.save({"wte.weight": [1, 2, 3]}, tmp_path / "m.bin")
    with pytest.raises(Gpt2LoadError, match="dictionary of named tensors"):
        load_gpt2(tmp_path / "m.bin")


class WritesAFile:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (open, (str(self.target), "w"))


def test_pickled_code_is_refused_and_never_runs(tmp_path):
    target = tmp_path / "pwned.txt"
    with (tmp_path / "pytorch_model.bin").open("wb") as f:
        pickle.dump({"wte.weight": WritesAFile(target)}, f, protocol=2)
    with pytest.raises(Gpt2LoadError, match="refused"):
        load_gpt2(tmp_path / "pytorch_model.bin")
    assert not target.exists()


def test_torch_save_with_pickled_code_is_refused_and_never_runs(tmp_path):
    target = tmp_path / "pwned.txt"
    torch.save({"wte.weight": WritesAFile(target)}, tmp_path / "pytorch_model.bin")
    assert not target.exists()  # saving only pickles the recipe
    with pytest.raises(Gpt2LoadError, match="Nothing in it was run"):
        load_gpt2(tmp_path / "pytorch_model.bin")
    assert not target.exists()


@pytest.mark.skipif(not os.environ.get("GPT2_WEIGHTS"), reason="set GPT2_WEIGHTS to a real GPT-2 weights file")
def test_real_gpt2_small_loads_and_predicts_finite_logits():
    model, meta = load_gpt2(os.environ["GPT2_WEIGHTS"])
    assert (meta["vocab_size"], meta["max_len"]) == (50257, 1024) and meta["d_model"] in (768, 1024, 1280, 1600)
    with torch.no_grad():
        assert torch.isfinite(model(torch.tensor([[15496, 11, 616, 3290]]))).all()  # "Hello, my dog"
