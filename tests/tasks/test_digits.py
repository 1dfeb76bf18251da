"""Column arithmetic: exact worked solutions, slips that are skills, a held-out set disjoint from training by
content, and completions long and varied enough for the F- filter and SAGC to act."""
import random
import statistics

import pytest

from node.config import build_config
from node.evaluation import held_out_items
from node.models.tokenizer import build_tokenizer
from node.peer import Peer
from node.tasks import get_task
from node.tasks.base import HELD_OUT_START
from node.tasks.digits import (
    HELD_OUT_SHARE,
    addition_steps,
    evaluates,
    held_out,
    parse_prompt,
    prompt,
    regroupings,
    subtraction_steps,
    worked,
)


def test_worked_solutions_are_exact():
    assert worked(4821, "+", 397) == ("1+7=8,2+9=11,8+3+1=12,4+1=5;5218", 5218)
    assert worked(4821, "-", 397) == ("11-7=4,12-9-1=2,8-3-1=4,4=4;4424", 4424)
    assert worked(1000, "-", 999) == ("10-9=1,10-9-1=0,10-9-1=0,1-1=0;1", 1)
    assert worked(95, "+", 7) == ("5+7=12,9+1=10;102", 102)
    assert worked(7, "-", 7) == ("7-7=0;0", 0)


def test_slips_drop_carries_and_borrows():
    """The slip is a carry / borrow not passed on: the column is worked as before, the next one lacks its 1."""
    assert addition_steps(95, 7, skill=0.0) == (["5+7=12", "9=9"], 92)
    assert subtraction_steps(4821, 397, skill=0.0) == (["11-7=4", "12-9=3", "8-3=5", "4=4"], 4534)
    assert worked(42, "-", 19, 0.0) == ("12-9=3,4-1=3;33", 33)
    assert worked(4821, "+", 397, skill=0.0)[1] == 4118
    assert worked(4111, "+", 222, skill=0.0) == worked(4111, "+", 222)  # no carry: no slip to make
    assert [regroupings(*p) for p in ((4821, "+", 397), (4821, "-", 397), (95, "+", 7), (4111, "+", 222))] == \
        [2, 2, 2, 0]


def test_a_trace_of_the_skill_passes_each_carry_on_by_chance():
    """At skill 0.25 each carry / borrow is passed on independently: a problem with k of them comes out right
    with probability 0.25^k (measured over 4000 draws)."""
    rng = random.Random(3)
    for a, op, b in ((95, "+", 7), (4821, "-", 397), (1000, "-", 999)):
        right, k = a + b if op == "+" else a - b, regroupings(a, op, b)
        share = statistics.mean(worked(a, op, b, 0.25, rng)[1] == right for _ in range(4000))
        assert abs(share - 0.25**k) < 0.02, (a, op, b, share)
    try:
        worked(95, "+", 7, 0.5)
    except ValueError as error:
        assert "random generator" in str(error)
    else:
        raise AssertionError("a partial skill without a generator was accepted")


def test_every_worked_answer_is_the_true_result():
    rng = random.Random(0)
    for _ in range(2000):
        a, b = sorted((rng.randint(1, 99999), rng.randint(1, 99999)), reverse=True)
        assert worked(a, "+", b)[1] == a + b
        assert worked(a, "-", b)[1] == a - b
        text, result = worked(a, "-", b)
        assert text.endswith(f";{result}") and text.count(",") == len(str(a)) - 1
        for op in "+-":
            slipped = worked(a, op, b, 0.0)
            assert (slipped == worked(a, op, b)) == (regroupings(a, op, b) == 0)


def test_items_rebuild_and_splits_have_their_columns():
    task = get_task("digits")
    assert task.item("train", 77) == get_task("digits").item("train", 77)
    for split, columns in (("train", {1, 2, 3, 4, 5}), ("test", {6})):
        problems = [task.problem(split, i) for i in range(400)]
        assert {len(str(a)) for a, _, _ in problems} == columns
        assert {op for _, op, _ in problems} == {"+", "-"}
        assert all(regroupings(*p) >= 1 for p in problems)  # the skill is needed in every problem
    only_add = [get_task("digits-add").item("train", i).prompt for i in range(100)]
    assert all("+" in p and "-" not in p for p in only_add)


def test_held_out_by_content_never_trained_on():
    """A 400-step run's training prompts (what a peer draws: 16 prompts a step) hold no held-out problem, and the
    held-out set is held out by content (its problems are on the held-out side of the partition)."""
    cfg = build_config({"model": {"name": "tiny-add"}, "task": {"name": "digits"},
                        "train": {"prompts_per_step": 16}})
    peer = Peer(cfg)
    try:
        trained = [item.prompt for _ in range(400) for item in peer.next_items(16)]
    finally:
        peer.close()
    task = get_task("digits")
    for split in ("train", "test"):
        evaluation = held_out_items(task, split, 512)
        assert len({i.prompt for i in evaluation}) > 400  # (one-column sums are few: 45 that carry)
        assert not {i.prompt for i in evaluation} & set(trained)
        assert all(held_out(*task.problem(split, i.ref.index)) for i in evaluation)
    assert not any(held_out(*get_task("digits").problem("train", i)) for i in range(2000))
    drawn = [task.problem("train", HELD_OUT_START + i) for i in range(200)]
    assert all(held_out(*p) for p in drawn)
    rng = random.Random(1)
    space = [(rng.randint(1, 99999), "+-"[i % 2], rng.randint(1, 99999)) for i in range(8000)]
    assert abs(statistics.mean(held_out(*p) for p in space) - 1 / HELD_OUT_SHARE) < 0.02


def test_completions_are_long_and_varied():
    """Canonical completions (work, answer, end token) in the zoo's character tokens: mean 15-40, coefficient of
    variation at least 0.4 in distribution; out of distribution longer still."""
    tokenizer = build_tokenizer("char")
    task = get_task("digits")

    def lengths(split):
        return [len(tokenizer(worked(*task.problem(split, i))[0]).input_ids) + 1 for i in range(3000)]

    train = lengths("train")
    mean = statistics.mean(train)
    assert 15 <= mean <= 40 and statistics.pstdev(train) / mean >= 0.4
    assert statistics.mean(lengths("test")) > mean + 10


def test_score_is_exact_match_of_the_answer():
    task = get_task("digits")
    item = next(task.item("train", i) for i in range(100) if "+" in task.item("train", i).prompt)
    a, b = (int(x) for x in item.prompt[:-1].split("+"))
    right, _ = worked(a, "+", b)
    assert task.score(item, right, finished=True) == 1.0
    assert task.score(item, right, finished=False) == 0.0  # cut off: no reward
    assert task.score(item, right.rsplit(";", 1)[0] + f";{a + b + 1}", finished=True) == 0.0
    assert task.score(item, f"The sum is {a + b}.", finished=True) == 1.0  # a chat model's sentence
    assert task.score(item, f"{a + b};{a + b}0", finished=True) == 0.0  # the last answer counts


def test_score_checks_the_work_shown():
    """A right answer is rewarded only after this problem's own working: not after another problem's right
    steps or a slipped step (a sender's made-up work, docs/SECURITY.md), in the zoo's form or in free text."""
    task = get_task("digits")
    item = task.item("train", next(i for i in range(100) if task.problem("train", i)[1] == "-"
                                   and task.problem("train", i)[0] >= 1000))
    a, op, b = parse_prompt(item.prompt)
    assert (a, op, b) == task.problem("train", item.ref.index) and item.answer == str(a - b)
    right = worked(a, op, b)[0]
    steps = right.rsplit(";", 1)[0].split(",")
    other = worked(a + 1, op, b)[0].rsplit(";", 1)[0]  # another problem, worked right
    assert task.score(item, " ".join(right), finished=True) == 1.0  # spacing does not matter
    assert task.score(item, f"{other};{item.answer}", finished=True) == 0.0
    assert task.score(item, ",".join(steps[1:]) + f";{item.answer}", finished=True) == 0.0  # a column missing
    slipped = steps[0].split("=")[0] + f"={int(steps[0].split('=')[1]) + 1}"
    assert task.score(item, ",".join([slipped, *steps[1:]]) + f";{item.answer}", finished=True) == 0.0
    assert task.score(item, f"{a} - {b} = {item.answer}", finished=True) == 1.0  # the problem itself
    assert task.score(item, f"First {steps[0]}, so the answer is {item.answer}.", finished=True) == 1.0
    assert task.score(item, f"First {a} - 1 = {a - 1}, then {item.answer}", finished=True) == 1.0  # about a
    assert task.score(item, f"Since {other.split(',')[0]} is 1+1=3, {item.answer}", finished=True) == 0.0
    assert task.score(item, f"I know 7+5=12, so {item.answer}", finished=True) == (
        1.0 if "7+5=12" in steps else 0.0)  # not this problem's unless it is one of its steps


def test_parse_prompt_inverts_prompt():
    assert parse_prompt(prompt(4821, "+", 397)) == (4821, "+", 397) and evaluates("12-9-1") == 2
    with pytest.raises(ValueError, match="not a digits prompt"):
        parse_prompt("What is 2 plus 2?")
