"""The F-TIS paper's other ablations (arXiv 2605.22537): the weight without the filter, or untruncated."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .ftis import FTIS


@dataclass
class TIS(FTIS):
    """TIS: f-tis without the filter (token weight min(w, C), group-relative advantage)."""

    name: ClassVar[str] = "tis"
    ignores: ClassVar[tuple[str, ...]] = ("g", "divergence")
    summary: ClassVar[str] = "received completions weigh pi_ours / pi_sender, at most C; nothing filtered"
    rule: ClassVar[str] = ""


@dataclass
class VIS(FTIS):
    """VIS: the importance weight w untruncated, no filter (the paper: learns fast early, then degrades)."""

    name: ClassVar[str] = "vis"
    ignores: ClassVar[tuple[str, ...]] = ("trunc_c", "g", "divergence")
    summary: ClassVar[str] = "received completions weigh pi_ours / pi_sender, uncapped; nothing filtered"
    truncated: ClassVar[bool] = False
    rule: ClassVar[str] = ""


@dataclass
class FNoIS(FTIS):
    """F-NoIS: weight 1 with the paper's filter (A <= 0 and D >= g): the filter alone."""

    name: ClassVar[str] = "f-nois"
    ignores: ClassVar[tuple[str, ...]] = ("trunc_c", "negative_c", "sequence_weights", "foreign_centering",
                                          "foreign_rows")
    summary: ClassVar[str] = ("received completions weigh 1; a row at or below its group's mean that diverges by g "
                              "nats or more teaches nothing")
    weighted: ClassVar[bool] = False


@dataclass
class FVIS(FTIS):
    """F-VIS: the untruncated weight with the paper's filter."""

    name: ClassVar[str] = "f-vis"
    ignores: ClassVar[tuple[str, ...]] = ("trunc_c",)
    summary: ClassVar[str] = ("received completions weigh pi_ours / pi_sender, uncapped; a row at or below its "
                              "group's mean that diverges by g nats or more teaches nothing")
    truncated: ClassVar[bool] = False
