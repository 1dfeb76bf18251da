"""Alone: no swarm at all."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .nois import NoIS


@dataclass
class Alone(NoIS):
    """Alone: on-policy GRPO on our own groups, each row at weight 1; the peer joins no swarm, shares nothing and
    receives nothing (were a received row in the batch, it would be masked out). The baseline of every
    comparison."""

    name: ClassVar[str] = "alone"
    summary: ClassVar[str] = "no swarm: our own groups only"
    shares: ClassVar[bool] = False
