"""What the neuron-reading tests share (tests/core/test_neurons.py, tests/ui/test_page_ffn.py)."""
from __future__ import annotations

from transformer_core.text.tokenizer import load_encoding


def absent_word(model, index) -> str:
    """A word that is one token of the model's vocabulary, with and without a space, and never in its held-out text."""
    enc, vocab = load_encoding(model.cfg.encoding), model.cfg.vocab_map
    held = {vocab[i] for i in index.vocab}
    for real in vocab:
        word = enc.decode([real]) if real >= 0 else ""
        if word.isascii() and word.isalpha() and len(word) > 3 and real not in held:
            spaced = enc.encode(" " + word)
            if len(spaced) > 1 or spaced[0] not in held:
                return word
    raise AssertionError("every word of the vocabulary is in the held-out text")
