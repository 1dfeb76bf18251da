"""Reinforcement learning: groups into training tensors with group-relative advantages (batching.py), the
F-TIS loss as a pure function (ftis.py), and the learner that takes one optimiser step (learner.py)."""
