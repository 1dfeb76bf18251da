"""Showing what other peers claim: their strings and numbers arrive from the network, so what a node prints of
them cannot disguise itself (control characters, bidirectional overrides that reorder a line) or pass for
plausible (a step of 2^64 - 1)."""
from __future__ import annotations

import unicodedata

HIDDEN = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}  # control, format (bidi overrides, zero width), surrogate,
#                                                     private, unassigned, line and paragraph separators
MAX_STEP = 10**9  # a step count beyond this is shown as a claim, not a number (a step a second: 30 years)
MAX_PARAMS = 10**13  # parameters beyond this likewise (10 T)


def safe_text(text: str, limit: int = 40) -> str:
    """`text` with every invisible or reordering character written as \\uXXXX, cut to `limit` characters."""
    shown = "".join(f"\\u{ord(ch):04x}" if unicodedata.category(ch) in HIDDEN else ch for ch in text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def safe_count(value: int, ceiling: int) -> str:
    """The number, or the number marked as implausible when it is negative or above `ceiling`."""
    return str(value) if 0 <= value <= ceiling else f"{value} (implausible)"


def safe_params(value: int) -> str:
    """A parameter count in millions ('135.00M'), or marked as implausible."""
    return f"{value / 1e6:.2f}M" if 0 <= value <= MAX_PARAMS else f"{value} parameters (implausible)"
