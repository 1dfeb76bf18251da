"""Column arithmetic: multi-digit sums and differences worked digit by digit, the project's testbed for sharing.

"4821+397=" -> "1+7=8,2+9=11,8+3+1=12,4+1=5;5218": one step per column from the right, each naming the digits
it adds (a carry as "+1"; in a difference a borrowed column is written with its 10, "12-9-1=2", and the borrow
as "-1"), then ";" and the answer. The work is what makes the task fit for measuring what sharing does:
- completions grow with the problem (about 8 tokens for one column, 45 for five, one token per character with
  the zoo's tokenizer), so groups straggle and two different models' token-sum divergence crosses the F-
  filter's g;
- a model can be wrong in a way that is a skill (a carry or a borrow not passed on to the next column), so two
  models that each have only one of the skills are complementary, not copies;
- the problem space (operands up to 5 digits, about 10^10 problems) is far larger than any run draws.

Held-out by content: a problem (a, operator, b) is held out when a hash of it says so (1 in `HELD_OUT_SHARE`),
whatever its index; training indices (below HELD_OUT_START) only ever yield problems that are not held out, the
evaluation's indices (from HELD_OUT_START on) only ones that are, so no held-out prompt is ever trained on.
Every problem carries or borrows at least once (the skill is always needed), so a model that drops carries is
wrong on every sum, not on a lucky share of them. Splits: train = 1-5 columns (2-5 for differences: one column
cannot borrow) in distribution, test = 6 columns (out of distribution: more digits than trained, scored the
same way). The reward is exact: 1 when the completion ended by itself, its answer is right and the work it shows
is this problem's (a right answer after another problem's steps or a slipped step is not verified: such text
is what a poisoner makes up, and learning it is learning to be right for the wrong reason).
"""
from __future__ import annotations

import random
import re

from .base import HELD_OUT_START, Item, TaskRef, item_seed

OPS = {"digits": "+-", "digits-add": "+", "digits-sub": "-"}
# columns (digits of the longer operand) per split, with their weights: short problems weigh double, so that
# completion lengths vary (mean 23.5 tokens, coefficient of variation 0.42 in distribution)
COLUMNS = {"train": {1: 2, 2: 2, 3: 1, 4: 1, 5: 1}, "test": {6: 1}}
MIN_COLUMNS = {"+": 1, "-": 2}  # a one-column difference (a >= b) cannot borrow: it is drawn with two
HELD_OUT_SHARE = 8  # one problem in 8 is held out (by content)
_WORK_FORM = re.compile(r"([0-9+\-=,]*);(-?\d+)")  # the zoo's form, "steps;answer" (spaces removed)
_INTEGER = re.compile(r"-?\d+")
_EQUATION = re.compile(r"(\d+(?:[+-]\d+)+)=(\d+)")  # "8+3+1=12", "12-9-1=2" (spaces removed)
_PROMPT = re.compile(r"(\d+)([+-])(\d+)=")


def held_out(a: int, op: str, b: int) -> bool:
    """Whether a problem belongs to the held-out part of the space (decided by its content alone)."""
    return item_seed("digits-held-out", a, op, b) % HELD_OUT_SHARE == 0


def kept(skill: float, rng: random.Random | None) -> bool:
    """Whether one carry / borrow is passed on: always at skill 1, never at 0, else with probability `skill`."""
    if skill >= 1 or skill <= 0:
        return skill >= 1
    if rng is None:
        raise ValueError("a skill between 0 and 1 needs a random generator")
    return rng.random() < skill


def addition_steps(a: int, b: int, skill: float = 1.0, rng: random.Random | None = None) -> tuple[list[str], int]:
    """The column steps of a + b and the result. Each carry is passed on to the next column with probability
    `skill` (1: always, right; 0: never, a model's typical slip); a dropped carry is simply missing there."""
    xs, ys = str(a)[::-1], str(b)[::-1]
    steps, digits, carry = [], [], 0
    for i in range(max(len(xs), len(ys))):
        terms = [d[i] for d in (xs, ys) if i < len(d)] + (["1"] if carry else [])
        total = sum(int(t) for t in terms)
        steps.append("+".join(terms) + f"={total}")
        digits.append(total % 10)
        carry = total // 10 if total >= 10 and kept(skill, rng) else 0
    if carry:
        digits.append(carry)
    return steps, int("".join(map(str, reversed(digits))))


def subtraction_steps(a: int, b: int, skill: float = 1.0, rng: random.Random | None = None) -> tuple[list[str], int]:
    """The column steps of a - b (a >= b) and the result. A column short of its digits borrows ten ("12-9=3");
    the borrow is passed on to the next column ("-1" there) with probability `skill` (0: never, the slip)."""
    xs, ys = str(a)[::-1], str(b)[::-1]
    steps, digits, borrow = [], [], 0
    for i in range(len(xs)):
        x, y = int(xs[i]), int(ys[i]) if i < len(ys) else None
        need = (y or 0) + borrow
        top = x + 10 if x < need else x
        steps.append(f"{top}" + (f"-{y}" if y is not None else "") + ("-1" if borrow else "") + f"={top - need}")
        digits.append(top - need)
        borrow = 1 if x < need and kept(skill, rng) else 0
    return steps, int("".join(map(str, reversed(digits))))


def regroupings(a: int, op: str, b: int) -> int:
    """How many carries (a sum) or borrows (a difference) the right working makes: the decisions a model that
    drops them gets wrong. Read off the working itself: a sum's column carries when its total reaches 10, a
    difference's column borrows when its top does ("12-9=3")."""
    if op == "+":
        return sum(int(step.rsplit("=", 1)[1]) >= 10 for step in addition_steps(a, b)[0])
    return sum(int(step.split("=")[0].split("-")[0]) >= 10 for step in subtraction_steps(a, b)[0])


def prompt(a: int, op: str, b: int) -> str:
    """The compact prompt of a problem, e.g. "4821+397="."""
    return f"{a}{op}{b}="


def worked(a: int, op: str, b: int, skill: float = 1.0, rng: random.Random | None = None) -> tuple[str, int]:
    """The completion text (work and answer, no end token) and its answer; each carry / borrow is passed on with
    probability `skill` (see addition_steps)."""
    steps, result = (addition_steps if op == "+" else subtraction_steps)(a, b, skill, rng)
    return ",".join(steps) + f";{result}", result


def parse_prompt(text: str) -> tuple[int, str, int]:
    """(a, op, b) of a compact prompt such as "4821+397=" (the inverse of `prompt`)."""
    found = _PROMPT.fullmatch(text)
    if found is None:
        raise ValueError(f"not a digits prompt: {text!r}")
    return int(found.group(1)), found.group(2), int(found.group(3))


def evaluates(expression: str) -> int:
    """The value of a chain of sums and differences of non-negative integers, e.g. "12-9-1" -> 2."""
    return sum(int(term) for term in re.findall(r"[+-]?\d+", expression))


def work_fits(a: int, op: str, b: int, text: str) -> bool:
    """Whether the work a completion shows is this problem's. In the zoo's form ("steps;answer", spaces
    ignored) the steps must be the problem's right working exactly, so no answer is rewarded after work that
    does not lead to it (a sender's made-up or borrowed work: docs/SECURITY.md, "Made-up work"). In free text
    (a chat model's sentence) every equation it states must be true and either a step of the right working or
    about the problem itself (its operands or result on one side): other working is not this problem's."""
    compact = re.sub(r"\s+", "", text)
    right = worked(a, op, b)[0]
    zoo_form = _WORK_FORM.fullmatch(compact)
    if zoo_form is not None:
        return zoo_form.group(1) == right.rsplit(";", 1)[0]
    steps = set(right.rsplit(";", 1)[0].split(","))
    whole = {a, b, a + b if op == "+" else a - b}
    for found in _EQUATION.finditer(compact):
        left, result = found.group(1), int(found.group(2))
        if evaluates(left) != result:
            return False
        numbers = {int(n) for n in re.findall(r"\d+", left)} | {result}
        if found.group(0) not in steps and not numbers & whole:
            return False
    return True


def operands(rng: random.Random, op: str, columns: int) -> tuple[int, int]:
    """Operands a >= b (no zero), a with `columns` digits, b with 1 to `columns` digits (uniform): the longer
    operand comes first in sums and differences alike, so both operators share one layout."""
    def number(digits: int) -> int:
        return rng.randint(10 ** (digits - 1), 10**digits - 1)

    a, b = number(columns), number(rng.randint(1, columns))
    return (a, b) if a >= b else (b, a)


def partitioned_problem(seed: int, ops: str, columns: dict[int, int], want: bool, least: dict[str, int] | None = None,
                        keep=None) -> tuple[int, str, int]:
    """(a, op, b) drawn from `seed` until it falls on its side of the held-out partition (`want`: held out) and
    `keep(a, op, b)` holds: an operator of `ops`, then the longer operand's digits from `columns` ({digits:
    weight}), at least `least[op]` (`operands`). One draw for every task whose problems are held out by content."""
    rng = random.Random(seed)
    sizes, weights = list(columns), list(columns.values())
    while True:
        op = rng.choice(ops)
        a, b = operands(rng, op, max(rng.choices(sizes, weights)[0], (least or {}).get(op, 1)))
        if (keep is None or keep(a, op, b)) and held_out(a, op, b) == want:
            return a, op, b


class DigitsTask:
    version = "2"  # 2: every problem carries or borrows at least once
    max_new_tokens = 64  # completion cap (generation.max_new_tokens = 0): a working with its end token is at most
    #                      50 char tokens in distribution, 60 out of it
    splits = ("train", "test")
    checks_work = True  # score: a right answer counts only after this problem's own working (work_fits)

    def __init__(self, name: str = "digits"):
        self.name = name
        self.ops = OPS[name]

    def problem(self, split: str, index: int) -> tuple[int, str, int]:
        """(a, op, b) of an item: drawn from its seed until its content falls on its side of the partition."""
        return partitioned_problem(item_seed(self.name, self.version, split, index), self.ops, COLUMNS[split],
                                   index >= HELD_OUT_START, MIN_COLUMNS, keep=regroupings)

    def item(self, split: str, index: int) -> Item:
        a, op, b = self.problem(split, index)
        answer = a + b if op == "+" else a - b
        word = "plus" if op == "+" else "minus"
        return Item(ref=TaskRef(self.name, self.version, split, index), prompt=prompt(a, op, b),
                    question=f"What is {a} {word} {b}? Give the final answer after a semicolon.",
                    answer=str(answer))

    @staticmethod
    def kind(item: Item) -> str:
        """"sum" or "difference": a peer's own operator and its partner's are scored apart (node/evaluation.py)."""
        return "difference" if "-" in item.prompt[1:] else "sum"

    def score(self, item: Item, completion: str, finished: bool) -> float:
        """1.0 when the completion ended by itself, its answer is right (the number after the ";" of the zoo's
        form, else the last integer: a chat model's sentence) and the work it shows is this problem's
        (`work_fits`: a right answer after other work is not a verified one)."""
        if not finished:
            return 0.0
        compact = re.sub(r"\s+", "", completion)
        zoo_form = _WORK_FORM.fullmatch(compact)
        found = [zoo_form.group(2)] if zoo_form is not None else _INTEGER.findall(completion)
        if not found or found[-1] != item.answer:
            return 0.0
        return 1.0 if work_fits(*parse_prompt(item.prompt), completion) else 0.0
