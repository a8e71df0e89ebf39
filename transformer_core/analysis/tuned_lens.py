"""The tuned lens (Belrose et al., 2023): the logit lens reads every layer as if it spoke the last layer's basis,
which early layers of a small model do not; the tuned lens first maps each layer's residual by an affine translator
trained for that layer, h ↦ h + A h + b, so that reading it through the final norm and the output layer comes as close
as it can to the model's own distribution (KL(final ‖ row), the lens's measure, on held-out text). A and b start at
zero: an untrained translator is the logit lens. The last layer's row is the model's own logits (no translator).
`python -m transformer_core.train.tuned_lens --model NAME` trains one for a shipped model.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ..model.trace import Trace
from ..model.transformer import Transformer
from .blocks import check_top
from .logit_lens import LogitLens, _lens, kept_residuals, lens_window

FILE = "tuned_lens.safetensors"


class Translators(nn.Module):
    """One affine map per row the lens reads before the last: the embeddings (row 0) and layers 0 … L−2."""

    def __init__(self, d_model: int, rows: int) -> None:
        super().__init__()
        self.A = nn.Parameter(torch.zeros(rows, d_model, d_model))  # (R, d, d) starts at the logit lens
        self.b = nn.Parameter(torch.zeros(rows, d_model))  # (R, d)

    def forward(self, rows: list[int], resid: torch.Tensor) -> torch.Tensor:
        """resid: (len(rows), T, d), row r of the lens each; rows past the translators' (the last layer) unchanged."""
        out = []
        for r, h in zip(rows, resid, strict=True):
            h = h.to(self.A.dtype)
            out.append(h + h @ self.A[r].T + self.b[r] if r < self.A.size(0) else h)  # (T, d)
        return torch.stack(out)


def for_model(model: Transformer) -> Translators:
    """Fresh translators (the logit lens) of a model's width and depth."""
    return Translators(model.cfg.d_model, model.cfg.n_layers)


def shipped_folder(name: str) -> Path:
    """The folder of a shipped model (its translators lie beside its weights)."""
    from ..sources import Places

    return Places().shipped_dir / name.removeprefix("shipped:")


def load(folder: str | Path, model: Transformer) -> Translators | None:
    """The translators shipped beside a model (float32 in memory, from the int8 file), or None when the folder has
    none."""
    from safetensors.torch import load_file

    path = Path(folder) / FILE
    if not path.is_file():
        return None
    tensors = load_file(str(path))
    tr = for_model(model)
    if tuple(tensors.get("A", torch.empty(0)).shape) != tuple(tr.A.shape):
        return None  # made for another model: not used
    with torch.no_grad():
        tr.A.copy_(tensors["A"].float() * tensors["A_scale"].float()[..., None])  # int8 × each row's scale
        tr.b.copy_(tensors["b"].float())
    return tr.eval()


def save(tr: Translators, folder: str | Path) -> Path:
    """Write the translators: A in int8 with one float32 scale per row of each matrix (a 4-layer, 384-wide model's
    0.6 MB, half its float16 size: the default's folder stays within 25 MB), b in float16."""
    from safetensors.torch import save_file

    A = tr.A.detach().float()
    scale = A.abs().amax(-1).clamp_min(1e-12) / 127  # (R, d) each output row's step
    path = Path(folder) / FILE
    save_file({"A": torch.round(A / scale[..., None]).to(torch.int8).contiguous(), "A_scale": scale.contiguous(),
               "b": tr.b.detach().half().contiguous()}, str(path))
    return path


def tuned_lens_from_trace(model: Transformer, trace: Trace, tr: Translators, k: int = 5,
                          window: tuple[int, int] | None = None) -> LogitLens:
    """The tuned lens of batch item 0 of a trace (the same rows, measures and window as the logit lens), once per
    trace."""
    k, names = check_top(k, hi=100), kept_residuals(model, trace)
    window = lens_window(trace, window)

    def translate(rows, resid):
        with torch.inference_mode():
            return tr(rows, resid.float()).to(resid.dtype)

    return trace.memo(("tuned_lens", k, id(tr), window), lambda: _lens(model, trace, names, k, translate, window))
