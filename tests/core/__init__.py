"""Tests of transformer_core: the model, tokenizer, analyses, training, translation, model sources."""
