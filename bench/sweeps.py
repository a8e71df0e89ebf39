"""The analyses that run many forwards at once, timed against doing it one forward per part: every head (and FFN)
knocked out alone (the Intervene page's grid) and the residual stream patched at every (layer, position); and one
head patched from a second text (the page's patching section), with text B run and with its side kept.

    python bench/sweeps.py [--model KEY] [--lengths 32 73 128] [--threads 1] [--repeat 5]

Per length and metric: the batched sweep (`head_effects`: each layer's parts resumed from the intact stream entering
that layer), the same sweep done naively (one whole forward per knocked-out part, `ablation_edits`), one plain forward
for scale, and the largest difference between the two sweeps' numbers (they must agree); `patch` of the last layer's
head 0 from the text's words reversed, B run in the call and B's side kept (`patch_source`, as the page caches it).
One thread by default: what a replica of a workshop server has (deploy/ gives each its share of the cores).
"""
from __future__ import annotations

import statistics
import time

from common import figure, parser, print_table, setup_env, text_of_tokens, write_result


def ms(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def one_length(model, n: int, repeat: int) -> tuple[list, list]:
    """(table row, figures) for a text of n tokens."""
    import numpy as np
    import torch

    from transformer_core import prepare
    from transformer_core.analysis.blocks import kinds
    from transformer_core.analysis.head_effects import head_effects, residual_effects
    from transformer_core.analysis.interventions import ablation_edits, intervene, patch, patch_source

    text = text_of_tokens(n, encoding=model.cfg.encoding)
    prep = prepare(model, text)
    ids = prep.src_ids
    with torch.inference_mode():
        a, b = model(ids)[0, -1].topk(2).indices.tolist()

    def diff_of(logits) -> float:
        last = logits[0, -1].double()
        return float(last[a] - last[b])

    def naive() -> list[float]:  # one whole forward per knocked-out head
        out = []
        with torch.inference_mode():
            for k in kinds(model):
                for layer in range(model.cfg.n_layers):
                    for h in range(model.cfg.n_heads):
                        with intervene(ablation_edits(model, [(k, layer, h)])):
                            out.append(diff_of(model(ids)))
        return out

    with torch.inference_mode():
        intact = diff_of(model(ids))
    fast = head_effects(model, prep, "logit_diff", a, b)
    swept = np.concatenate([fast.heads[k].ravel() for k in fast.heads])
    diff = float(np.abs(np.array(naive()) - intact - swept).max())
    t_fwd = ms(lambda: model(ids), repeat)
    t_sweep = ms(lambda: head_effects(model, prep, "logit_diff", a, b), repeat)
    t_loss = ms(lambda: head_effects(model, prep, "loss"), repeat)
    t_naive = ms(naive, max(1, repeat // 2))
    t_grid = ms(lambda: residual_effects(model, prep, prep, "logit_diff", a, b), max(1, repeat // 2))
    prep_b, last = prepare(model, " ".join(reversed(text.split()))), model.cfg.n_layers - 1
    source = patch_source(model, prep_b, "dec_self", last)
    t_patch = ms(lambda: patch(model, prep, prep_b, "dec_self", last, 0), repeat)
    t_kept = ms(lambda: patch(model, prep, prep_b, "dec_self", last, 0, source=source), repeat)
    row = [n, f"{t_fwd:.1f}", f"{t_sweep:.0f}", f"{t_loss:.0f}", f"{t_naive:.0f}", f"{t_naive / t_sweep:.2f}",
           f"{t_grid:.0f}", f"{diff:.1e}", f"{t_patch:.0f} / {t_kept:.0f}"]
    figs = [figure(f"head sweep, {n} tokens (logit difference)", round(t_sweep, 1), "ms",
                   note=f"{t_sweep / t_fwd:.1f} forwards; one forward per head: {t_naive:.0f} ms"),
            figure(f"head sweep against one forward per head, {n} tokens: largest difference", diff, "", 1e-4, "<"),
            figure(f"patch one head, {n} tokens, text B kept", round(t_kept, 1), "ms",
                   note=f"B run too: {t_patch:.0f} ms")]
    return row, figs


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--model", default=None, help="a catalog key (default: the app's default model)")
    p.add_argument("--lengths", nargs="+", type=int, default=[32, 73, 128])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    setup_env(args.device)
    import torch

    from service import catalog
    from transformer_core.sources import load_model

    torch.set_num_threads(args.threads)
    key = args.model or catalog.default_key()
    model, _card = load_model(key)
    model.eval()
    repeat = 2 if args.quick else args.repeat
    rows, figs = [], []
    for n in args.lengths:
        if n <= model.cfg.max_len and not model.is_encoder_decoder:
            row, more = one_length(model, n, repeat)
            rows.append(row)
            figs += more
    print(f"\n{key}, {args.threads} thread(s), median of {repeat}")
    print_table(["tokens", "forward ms", "sweep ms", "sweep (loss) ms", "one forward per head ms", "speed-up",
                 "residual grid ms", "largest difference", "patch ms (B run / kept)"], rows)
    write_result("sweeps", figs, model=key, threads=args.threads, rows=rows)


if __name__ == "__main__":
    main()
