"""Training: synthetic tasks, data, the training loop and its defaults, checkpoints, the shipped-model build."""
