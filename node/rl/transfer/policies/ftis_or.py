"""F-TIS as the seed's summary reads its filter: every received row that did no better than its group dropped."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .ftis import FTIS


@dataclass
class FTISOr(FTIS):
    """F-TIS with the filter as the seed's summary of arXiv 2605.22537 states it: a row's advantage is zeroed when
    A <= 0 (received rows) OR D >= g ("samples with negative advantage are discarded; samples whose divergence
    exceeds g are also filtered"). So every received row at or below its group's mean teaches nothing, and a
    received right answer far from our model (D >= g) neither. The paper's own equation is AND (policy f-tis).
    Weights, advantages and foreign rows as f-tis; own rows are filtered only by D (theirs is ~0)."""

    name: ClassVar[str] = "f-tis-or"
    summary: ClassVar[str] = ("as f-tis, but a received row that did no better than its group's mean teaches "
                              "nothing, nor one that diverges by g nats or more")
    rule: ClassVar[str] = "or"
