"""Where do the column-arithmetic models go wrong? Each wrong greedy completion classified at its first wrong step.

For every model and held-out split of `digits` (node/tasks/digits.py), greedy completions of the held-out prompts
are compared step by step with the right working (`worked`); at the first step that differs the mistake is one
of: an operand digit misread (the column's digits are not the operands' digits there), the carry / borrow term
(digits right, the carried or borrowed one wrong or missing), the step's arithmetic (terms right, result wrong),
the number of steps (every step shown right, too few or too many), the answer after right steps, or (task
`digits-check`, node/tasks/checked.py) a check after the right work and answer.

Beside the first mistake, each column a completion reaches with every step before it right is scored on its
own (`column_outcomes`): whether that column takes a carry / borrow in, and whether its step is right. The rate
of right steps at carrying columns, by column, says whether a skill learnt on 1-5 columns still acts at the
same column of a 6-column problem and at the 6th column itself, apart from how many carries a longer problem
needs.

A model is a zoo name or a model directory (`swarm export` makes one of a run's checkpoint), so trained models
can be compared with their start:

    python -m bench.experiments.error_kinds [--models digit-add,digit-sub|DIR,...] [--task digits|digits-check]
        [--prompts 128] [--splits train,test]
"""
from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

KINDS = ("right", "operand digit misread", "carry / borrow term", "step arithmetic", "number of steps",
         "answer after right steps", "a check")


def terms(step: str) -> tuple[list[str], str]:
    """A step's terms and result: '12-9-1=2' -> (['12', '9', '1'], '2')."""
    left, _, result = step.partition("=")
    return re.split(r"[+-]", left), result


def first_mistake(text: str, a: int, op: str, b: int) -> str:
    """The kind of a completion's first mistake against the right working of a op b (both 'steps;answer', the
    completion's maybe followed by `digits-check`'s checks, '|...')."""
    from node.tasks.checked import SEPARATOR, checks_hold
    from node.tasks.digits import worked

    got_steps, _, got_rest = text.replace(" ", "").partition(";")
    got_answer, bar, got_checks = got_rest.partition(SEPARATOR)
    want_steps, _, want_answer = worked(a, op, b, 1.0)[0].partition(";")
    got, want = got_steps.split(","), want_steps.split(",")
    for column, (mine, theirs) in enumerate(zip(got, want, strict=False)):
        if mine == theirs:
            continue
        (mine_terms, _), (their_terms, _) = terms(mine), terms(theirs)
        if mine_terms == their_terms:
            return "step arithmetic"
        operands = 2 if b >= 10**column else 1  # (the shorter operand has no digit in its higher columns)
        digit = (a // 10**column) % 10
        try:  # (a difference's column may show its lent ten: 17 for a 7 that borrowed)
            first_right = int(mine_terms[0]) % 10 == digit
        except ValueError:
            return "operand digit misread"
        if first_right and mine_terms[1:operands] == their_terms[1:operands]:
            return "carry / borrow term"
        return "operand digit misread"
    if len(got) != len(want):
        return "number of steps"
    if got_answer != want_answer:
        return "answer after right steps"
    return "right" if checks_hold(a, op, b, bar + got_checks) else "a check"


def carries_in(a: int, op: str, b: int, column: int) -> bool:
    """Whether column `column` (0: units) of a op b takes a carry (a sum) or a borrow (a difference) in."""
    low = 10**column
    return (a % low + b % low >= low) if op == "+" else (a % low < b % low)


def column_outcomes(text: str, a: int, op: str, b: int) -> list[tuple[int, bool, bool]]:
    """(column, carries in, step right) for each column of the right working that a completion reaches with every
    step before it right: the columns after its first wrong step are not scored (they follow from it)."""
    from node.tasks.digits import worked

    got = text.replace(" ", "").partition(";")[0].split(",")
    want = worked(a, op, b, 1.0)[0].partition(";")[0].split(",")
    out = []
    for column, theirs in enumerate(want):
        right = column < len(got) and got[column] == theirs
        out.append((column, carries_in(a, op, b, column), right))
        if not right:
            break
    return out


def greedy_completions(model, tokenizer, task, split: str, prompts: int,
                       max_new_tokens: int) -> list[tuple[int, str, int, str, bool]]:
    """(a, operator, b, completion, scored right) of a loaded model's greedy completions of a split's held-out
    prompts."""
    import torch

    from node.evaluation import held_out_items
    from node.tasks.digits import parse_prompt

    model.eval()
    found = []
    for item in held_out_items(task, split, prompts):
        ids = tokenizer(item.prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)
        text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
        found.append((*parse_prompt(item.prompt), text, bool(task.score(item, text, True))))
    return found


def mistake_counts(completions) -> collections.Counter:
    """{(operator, kind): count} of greedy_completions' completions."""
    return collections.Counter((op, "right" if right else first_mistake(text, a, op, b))
                               for a, op, b, text, right in completions)


def column_counts(completions) -> dict[str, dict[str, dict[str, list[int]]]]:
    """{operator: {"carry" | "no carry": {column: [steps reached, steps right]}}} of greedy_completions'
    completions (column_outcomes summed; columns as strings, for JSON)."""
    out: dict = {op: {"carry": {}, "no carry": {}} for op in ("+", "-")}
    for a, op, b, text, _ in completions:
        for column, carry, right in column_outcomes(text, a, op, b):
            cell = out[op]["carry" if carry else "no carry"].setdefault(str(column), [0, 0])
            cell[0] += 1
            cell[1] += int(right)
    return out


def completions_of(model_name: str, split: str, prompts: int, max_new_tokens: int,
                   task_name: str = "digits") -> list[tuple[int, str, int, str, bool]]:
    """greedy_completions of a zoo model or model directory."""
    from node.models.loading import load_base
    from node.tasks import get_task

    model, tokenizer, _ = load_base(model_name)
    return greedy_completions(model, tokenizer, get_task(task_name), split, prompts, max_new_tokens)


def classify(model_name: str, split: str, prompts: int, max_new_tokens: int,
             task_name: str = "digits") -> collections.Counter:
    """mistake_counts of a zoo model's or model directory's greedy completions."""
    return mistake_counts(completions_of(model_name, split, prompts, max_new_tokens, task_name))


def by_operator(counts: collections.Counter) -> dict[str, dict[str, int]]:
    """{operator: {kind: count}} of mistake_counts' {(operator, kind): count}."""
    return {op: {kind: counts[(op, kind)] for kind in KINDS} for op in ("+", "-")}


def table_head(first: str = "model") -> str:
    """A markdown table's head: `first` (one or more columns, "a | b"), the split, operator, prompts, each kind."""
    head = f"| {first} | split | operator | prompts | {' | '.join(KINDS)} |"
    return head + "\n|" + "---|" * (head.count("|") - 1)


def table_rows(label: str, split: str, counts: dict[str, dict[str, int]]) -> list[str]:
    """One markdown row per operator of by_operator's counts: the prompts and each kind's count."""
    return [f"| {label} | {'ID' if split == 'train' else 'OOD'} | {op} | {sum(kinds.values())} | "
            + " | ".join(str(kinds[k]) for k in KINDS) + " |" for op, kinds in counts.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="digit-add,digit-sub")
    parser.add_argument("--prompts", type=int, default=128, help="held-out prompts per split (both operators)")
    parser.add_argument("--splits", default="train,test", help="train: in distribution; test: out of it")
    parser.add_argument("--task", default="digits", choices=("digits", "digits-check"))
    parser.add_argument("--max-new-tokens", type=int, default=0, help="completion cap (0: the task's)")
    args = parser.parse_args()
    import torch

    from node.tasks import get_task
    from node.tasks.base import completion_cap

    torch.set_num_threads(1)
    cap = args.max_new_tokens or completion_cap(get_task(args.task))
    print(table_head())
    for model in args.models.split(","):
        for split in args.splits.split(","):
            counts = classify(model, split, args.prompts, cap, args.task)
            print("\n".join(table_rows(model, split, by_operator(counts))), flush=True)


if __name__ == "__main__":
    main()
