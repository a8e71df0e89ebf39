"""What a learner reads off a model: one query step by step, positions, the next token, the residual
stream, the logit lens, heads, ablation and patching, surprise per token, BPE merges, comparisons, sinks, export."""
