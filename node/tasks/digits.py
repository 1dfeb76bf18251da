"""Column arithmetic: multi-digit sums and differences worked digit by digit, the project's testbed for sharing.

"4821+397=" -> "1+7=8,2+9=11,8+3+1=12,4+1=5;5218": one step per column from the right, each naming the digits
it adds (a carry as "+1"; in a difference a borrowed column is written with its 10, "12-9-1=2", and the borrow
as "-1"), then ";" and the answer. The work is what makes the task fit for measuring what sharing does:
- completions grow with the problem (about 8 tokens for one column, 35 for four, one token per character with
  the zoo's tokenizer), so groups straggle and two different models' token-sum divergence crosses the F-
  filter's g;
- a model can be wrong in a way that is a skill (dropping a carry, dropping a borrow), so experts of one
  operator are complementary, not copies;
- the problem space (operands up to 4 digits, about 2 x 10^8 problems) is far larger than any run draws.

Held-out by content: a problem (a, operator, b) is held out when a hash of it says so (1 in `HELD_OUT_SHARE`),
whatever its index; training indices (below HELD_OUT_START) only ever yield problems that are not held out, the
evaluation's indices (from HELD_OUT_START on) only ones that are, so no held-out prompt is ever trained on.
Splits: train = 1-4 columns (in distribution), test = 5 columns (out of distribution: more digits than trained,
scored the same way). The reward is exact: 1 when the completion ended by itself and its answer is right.
"""
from __future__ import annotations

import random
import re

from .base import HELD_OUT_START, Item, TaskRef, item_seed

OPS = {"digits": "+-", "digits-add": "+", "digits-sub": "-"}
COLUMNS = {"train": (1, 4), "test": (5, 5)}  # columns (digits of the longer operand) per split
HELD_OUT_SHARE = 8  # one problem in 8 is held out (by content)
_ANSWER = re.compile(r";\s*(-?\d+)\s*$")
_INTEGER = re.compile(r"-?\d+")


def held_out(a: int, op: str, b: int) -> bool:
    """Whether a problem belongs to the held-out part of the space (decided by its content alone)."""
    return item_seed("digits-held-out", a, op, b) % HELD_OUT_SHARE == 0


def addition_steps(a: int, b: int, carries: bool = True) -> tuple[list[str], int]:
    """The column steps of a + b and the result; `carries=False` drops every carry (a model's typical slip)."""
    xs, ys = str(a)[::-1], str(b)[::-1]
    steps, digits, carry = [], [], 0
    for i in range(max(len(xs), len(ys))):
        terms = [d[i] for d in (xs, ys) if i < len(d)] + (["1"] if carry else [])
        total = sum(int(t) for t in terms)
        steps.append("+".join(terms) + f"={total}")
        digits.append(total % 10)
        carry = total // 10 if carries else 0
    if carry:
        digits.append(carry)
    return steps, int("".join(map(str, reversed(digits))))


def subtraction_steps(a: int, b: int, borrows: bool = True) -> tuple[list[str], int]:
    """The column steps of a - b (a >= b) and the result; `borrows=False` takes each column's digits in the
    larger-minus-smaller order and never borrows (the typical slip)."""
    xs, ys = str(a)[::-1], str(b)[::-1]
    steps, digits, borrow = [], [], 0
    for i in range(len(xs)):
        x, y = int(xs[i]), int(ys[i]) if i < len(ys) else None
        need = (y or 0) + borrow
        if not borrows:
            top, low = (x, y) if y is None or x >= y else (y, x)
            steps.append(f"{top}" + (f"-{low}" if low is not None else "") + f"={top - (low or 0)}")
            digits.append(top - (low or 0))
            continue
        top = x + 10 if x < need else x
        steps.append(f"{top}" + (f"-{y}" if y is not None else "") + ("-1" if borrow else "") + f"={top - need}")
        digits.append(top - need)
        borrow = 1 if x < need else 0
    return steps, int("".join(map(str, reversed(digits))))


def prompt(a: int, op: str, b: int) -> str:
    """The compact prompt of a problem, e.g. "4821+397="."""
    return f"{a}{op}{b}="


def worked(a: int, op: str, b: int, skill: bool = True) -> tuple[str, int]:
    """The completion text (work and answer, no end token) and its answer; skill=False drops carries/borrows."""
    steps, result = addition_steps(a, b, skill) if op == "+" else subtraction_steps(a, b, skill)
    return ",".join(steps) + f";{result}", result


def operands(rng: random.Random, op: str, columns: int) -> tuple[int, int]:
    """Operands a >= b (no zero), a with `columns` digits, b with 1 to `columns` digits (uniform): the longer
    operand comes first in sums and differences alike, so both operators share one layout."""
    def number(digits: int) -> int:
        return rng.randint(10 ** (digits - 1), 10**digits - 1)

    a, b = number(columns), number(rng.randint(1, columns))
    return (a, b) if a >= b else (b, a)


class DigitsTask:
    version = "1"
    splits = ("train", "test")

    def __init__(self, name: str = "digits"):
        self.name = name
        self.ops = OPS[name]

    def problem(self, split: str, index: int) -> tuple[int, str, int]:
        """(a, op, b) of an item: drawn from its seed until its content falls on its side of the partition."""
        rng = random.Random(item_seed(self.name, self.version, split, index))
        want = index >= HELD_OUT_START
        lo, hi = COLUMNS[split]
        while True:  # 1.14 draws on average for training, 8 for held-out items
            op = rng.choice(self.ops)
            a, b = operands(rng, op, rng.randint(lo, hi))
            if held_out(a, op, b) == want:
                return a, op, b

    def item(self, split: str, index: int) -> Item:
        a, op, b = self.problem(split, index)
        answer = a + b if op == "+" else a - b
        word = "plus" if op == "+" else "minus"
        return Item(ref=TaskRef(self.name, self.version, split, index), prompt=prompt(a, op, b),
                    question=f"What is {a} {word} {b}? Give the final answer after a semicolon.",
                    answer=str(answer))

    def score(self, item: Item, completion: str, finished: bool) -> float:
        """1.0 when the completion ended by itself and its answer is right: the number after the last ";"
        (the zoo's work format), else the last integer (a chat model's sentence)."""
        if not finished:
            return 0.0
        text = completion.strip()
        found = _ANSWER.findall(text) or _INTEGER.findall(text)
        return 1.0 if found and found[-1] == item.answer else 0.0
