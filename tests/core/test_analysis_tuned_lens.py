"""The tuned lens: untrained translators are the logit lens; the shipped ones, applied here by hand (h + A h + b from
the file, the final norm, the output layer, a log-softmax), give the lens's numbers, and read the held-out text
shipped beside the model closer to its final distribution than the logit lens in every row but the last."""
import json

import numpy as np
import torch
from safetensors.torch import load_file

from transformer_core import load_model, trace_text
from transformer_core.analysis import tuned_lens
from transformer_core.analysis.logit_lens import lens_from_trace, residual_names

TEXT = "The children walked to school in the rain, and their teacher gave them hot tea. 孩子们冒雨走到学校。"


def test_untrained_translators_are_the_logit_lens():
    model, _ = load_model("everyday-gpt")
    _, trace = trace_text(model, TEXT)
    plain, tuned = lens_from_trace(model, trace, 5), tuned_lens.tuned_lens_from_trace(
        model, trace, tuned_lens.for_model(model), 5)
    assert torch.equal(plain.ids, tuned.ids) and torch.allclose(plain.kl, tuned.kl, atol=1e-5)


def test_the_shipped_tuned_lens_is_what_its_file_says_and_reads_held_out_text_better():
    model, card = load_model("everyday-gpt")
    folder = tuned_lens.shipped_folder("everyday-gpt")
    raw = {k: v.double() for k, v in load_file(str(folder / tuned_lens.FILE)).items()}  # int8 A (L, d, d), b (L, d)
    raw["A"] = raw["A"] * raw["A_scale"][..., None]  # each row's scale
    held = (folder / "heldout_brown.txt").read_text(encoding="utf-8")[:2000]
    _, trace = trace_text(model, held)
    lens = tuned_lens.tuned_lens_from_trace(model, trace, tuned_lens.load(folder, model), 5)
    plain = lens_from_trace(model, trace, 5)
    names = residual_names(model)
    with torch.no_grad():
        logp = torch.log_softmax(trace.logits[0].double(), -1)  # (T, V) the model's own
        for r in range(model.cfg.n_layers):  # every row but the last, by hand
            h = trace[names[r]][0].double()
            h = h + h @ raw["A"][r].T + raw["b"][r]
            norm, out = model.decoder.norm, model.out  # the final LayerNorm and the output layer, in float64
            normed = h if isinstance(norm, torch.nn.Identity) else torch.nn.functional.layer_norm(
                h, h.shape[-1:], norm.weight.double(), norm.bias.double(), norm.eps)  # (none on the default)
            logq = torch.log_softmax(normed @ out.weight.double().T + (out.bias.double() if out.bias is not None
                                                                        else 0), -1)
            kl = (logp.exp() * (logp - logq)).sum(-1)  # (T,)
            assert np.abs(kl.numpy() - lens.kl[r].numpy()).max() < 2e-3
            assert float(kl.mean()) < float(plain.kl[r].mean())  # closer to the end than the logit lens
    assert torch.equal(lens.ids[-1], plain.ids[-1])  # the last row: the model's own logits either way
    entry = json.loads((folder / "card.json").read_text(encoding="utf-8"))["tuned_lens"]
    assert all(t < p for t, p in zip(entry["heldout_kl_tuned_lens"], entry["heldout_kl_logit_lens"], strict=True))
    assert len(entry["heldout_kl_tuned_lens"]) == model.cfg.n_layers and entry["steps"] > 0
