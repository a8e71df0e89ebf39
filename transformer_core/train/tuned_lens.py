"""Train the tuned lens's translators of a shipped language model (analysis/tuned_lens.py) and write them beside it
with its card entry: the data, the steps, the time and the held-out KL per layer of the logit lens and the tuned lens.

    python -m transformer_core.train.tuned_lens --model everyday-gpt [--cache .corpora] [--steps 400] [--threads 2]

Training text: windows of the model's own training corpora (their training split, mixed by the card's weights);
held-out text: the samples shipped beside the model (heldout_*.txt, never trained on by the model or the lens). The
model stays frozen; each translator learns to make its layer's reading match the model's own distribution
(KL(final ‖ row), summed over the rows), AdamW with a cosine decay.
"""
from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from ..analysis import tuned_lens
from ..analysis.logit_lens import lens_logits, residual_names
from ..model.trace import run_with_trace
from ..text.inputs import prepare

ROOT = Path(__file__).resolve().parents[2]
WINDOWS, BATCH_TOKENS = 192, 1024  # training windows of the context's length; tokens per step


def windows(model, texts: list[str], n: int, seed: int = 0) -> list[torch.Tensor]:
    """n token windows (1, context) cut from the texts, in the model's own ids."""
    rng, out, ctx = random.Random(seed), [], model.cfg.max_len
    for _ in range(n * 20):
        if len(out) >= n:
            break
        text = rng.choice(texts)
        start = rng.randrange(max(1, len(text) - 4 * ctx))
        ids = prepare(model, text[start:start + 6 * ctx]).src_ids  # (1, ≤ context)
        if ids.size(1) == ctx:
            out.append(ids)
    return out


@torch.no_grad()
def residuals(model, wins: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """((rows, N, d) every lens row's residual, (N, d) the last layer's) over all windows' positions."""
    names = residual_names(model)
    rows = []
    for ids in wins:
        _, trace = run_with_trace(model, ids, names=names)
        rows.append(torch.stack([trace[n][0].float() for n in names]))  # (L + 1, T, d)
    stacked = torch.cat(rows, dim=1)  # (L + 1, N, d)
    return stacked[:-1], stacked[-1]


def kl_per_row(model, tr, resid: torch.Tensor, last: torch.Tensor, chunk: int = 512) -> list[float]:
    """Mean KL(final ‖ row) in nats over the positions, per row (translated when tr is given), in float64 sums."""
    out = []
    for r in range(resid.size(0)):
        total = 0.0
        for i in range(0, resid.size(1), chunk):
            logp = F.log_softmax(lens_logits(model, last[i:i + chunk]).float(), -1)  # (n, V) the model's own
            h = resid[r, i:i + chunk]
            h = h if tr is None else tr([r], h[None])[0]
            logq = F.log_softmax(lens_logits(model, h).float(), -1)
            total += float((logp.exp() * (logp - logq)).sum())
        out.append(total / resid.size(1))
    return out


def train(model, resid: torch.Tensor, last: torch.Tensor, steps: int, lr: float = 1e-3, seed: int = 0):
    """The translators trained on the residuals (rows, N, d) against the last layer's distribution."""
    torch.manual_seed(seed)
    tr = tuned_lens.for_model(model)
    for p in model.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(tr.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    R, N = resid.size(0), resid.size(1)
    for step in range(steps):
        idx = torch.randint(0, N, (BATCH_TOKENS,))
        logp = F.log_softmax(model.out(model.decoder.norm(last[idx])).float(), -1).detach()  # (B, V)
        h = tr(list(range(R)), resid[:, idx])  # (R, B, d)
        logq = F.log_softmax(model.out(model.decoder.norm(h)).float(), -1)  # (R, B, V)
        loss = (logp.exp()[None] * (logp[None] - logq)).sum(-1).mean(-1).sum()  # Σ_rows mean KL
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"  tuned lens step {step}/{steps} loss {float(loss):.3f}", flush=True)
    return tr.eval()


def build(name: str, cache: Path, steps: int, out: Path) -> dict:
    from ..sources import load_model
    from .corpora import load_corpus

    model, card = load_model(name)
    folder = out / name
    cfg = card["train_config"]
    t0 = time.perf_counter()
    texts = []
    for corpus, weight in zip(cfg["corpus"], cfg["corpus_weights"], strict=True):
        train_text = load_corpus(corpus, cache).train
        texts += [train_text] * max(1, round(weight * 50))  # drawn by the card's weights
    held = [p.read_text(encoding="utf-8") for p in sorted(folder.glob("heldout_*.txt"))]
    train_r, train_last = residuals(model, windows(model, texts, WINDOWS, seed=1))
    held_r, held_last = residuals(model, windows(model, held, 48, seed=2))
    tr = train(model, train_r, train_last, steps)
    seconds = time.perf_counter() - t0
    tuned_lens.save(tr, folder)
    tr = tuned_lens.load(folder, model)  # the card measures what ships (int8 A)
    with torch.no_grad():
        entry = {"data": f"{WINDOWS} windows of {model.cfg.max_len} tokens of the model's training corpora "
                         f"({', '.join(cfg['corpus'])}, by its weights); held out: 48 windows of its heldout_*.txt",
                 "steps": steps, "batch_tokens": BATCH_TOKENS, "seconds": round(seconds, 1),
                 "device": "cpu", "threads": torch.get_num_threads(),
                 "heldout_kl_logit_lens": [round(x, 4) for x in kl_per_row(model, None, held_r, held_last)],
                 "heldout_kl_tuned_lens": [round(x, 4) for x in kl_per_row(model, tr, held_r, held_last)],
                 "command": f"python -m transformer_core.train.tuned_lens --model {name} --steps {steps}"}
    card_path = folder / "card.json"
    data = json.loads(card_path.read_text(encoding="utf-8"))
    data["tuned_lens"] = entry
    card_path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return entry


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", nargs="+", default=["everyday-gpt", "modern-gpt"])
    p.add_argument("--cache", default=str(ROOT / ".corpora"))
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(ROOT / "assets" / "models"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    for name in args.model:
        entry = build(name, Path(args.cache), args.steps, Path(args.out))
        print(name, json.dumps(entry))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
