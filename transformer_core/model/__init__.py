"""The model: config, positions, attention, layers, the Transformer, hook points and tracing."""
