"""Persistence: a peer's training state as checkpoints and the final outputs of a run (checkpoint.py), in the
layout node/models/saved.py reads (loading a saved model needs only that)."""
