"""The text side: the tiktoken tokenizer (shipped BPE files work offline) and input preparation."""
