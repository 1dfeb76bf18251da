"""Reinforcement learning: what a group teaches (transfer/: the named transfer policies, the guard in front of
them, a batch's plan), groups into training tensors (batching.py), the clipped objective (loss.py), the harm
detector's head gradients (alignment.py) and the learner that takes the optimiser steps (learner.py)."""
