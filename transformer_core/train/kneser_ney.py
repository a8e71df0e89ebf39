"""An interpolated Kneser-Ney trigram: the honest n-gram baseline printed beside a language model's bits per byte.

P(w | u v) = max(c(u v w) − D, 0) / c(u v ·) + D · N(u v ·) / c(u v ·) · P(w | v)
P(w | v)   = max(N(· v w) − D, 0) / N(· v ·) + D · N(v ·) / N(· v ·) · P(w)
P(w)       = max(N(· w) − D, 0) / N(· ·) + D · |{w: N(· w) > 0}| / N(· ·) · 1 / V
where c counts n-grams and N counts distinct left (or right) neighbours (Chen & Goodman 1998, one discount D).
An unseen context hands all its weight to the next lower order.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence


class KneserNeyTrigram:
    def __init__(self, streams: Sequence[Sequence[int]], vocab_size: int, discount: float = 0.75) -> None:
        self.D, self.V = discount, vocab_size
        tri: Counter = Counter()
        for ids in streams:
            tri.update(zip(ids, ids[1:], ids[2:]))
        self.tri = tri
        self.ctx2, self.follow2 = Counter(), Counter()  # c(u v ·), N(u v ·)
        left_bi: Counter = Counter()  # N(· v w): distinct u before (v, w)
        for (u, v, w), c in tri.items():
            self.ctx2[u, v] += c
            self.follow2[u, v] += 1
            left_bi[v, w] += 1
        self.left_bi = left_bi
        self.left_ctx, self.follow1 = Counter(), Counter()  # N(· v ·), N(v ·) over distinct (v, w)
        left_uni: Counter = Counter()  # N(· w): distinct v before w
        for (v, w), n in left_bi.items():
            self.left_ctx[v] += n
            self.follow1[v] += 1
            left_uni[w] += 1
        self.left_uni, self.n_bigram_types = left_uni, len(left_bi)

    def p_unigram(self, w: int) -> float:
        n = self.n_bigram_types
        return max(self.left_uni[w] - self.D, 0) / n + self.D * len(self.left_uni) / n / self.V

    def p_bigram(self, v: int, w: int) -> float:
        total = self.left_ctx[v]
        if not total:
            return self.p_unigram(w)
        return (max(self.left_bi[v, w] - self.D, 0) + self.D * self.follow1[v] * self.p_unigram(w)) / total

    def prob(self, u: int | None, v: int, w: int) -> float:
        """P(w | u v); u None (the first prediction of a text) uses the bigram level."""
        total = self.ctx2[u, v] if u is not None else 0
        if not total:
            return self.p_bigram(v, w)
        return (max(self.tri[u, v, w] - self.D, 0) + self.D * self.follow2[u, v] * self.p_bigram(v, w)) / total

    def bits(self, ids: Sequence[int]) -> list[float]:
        """−log₂ P(ids[t] | ids[t−2], ids[t−1]) for t = 1 .. len − 1 (the first token is not predicted)."""
        return [-math.log2(self.prob(ids[t - 2] if t >= 2 else None, ids[t - 1], ids[t])) for t in range(1, len(ids))]
