"""What a learner reads off a traced model: one query step by step, positions, the next token, alignment."""
