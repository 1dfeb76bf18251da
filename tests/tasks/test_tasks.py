"""Tasks: references rebuild the same items; verifiers score what they should."""
import pytest

from node.errors import UnknownTaskError
from node.evaluation import held_out_items
from node.tasks import TaskRef, completion_cap, get_task, offline_task, task_names
from node.tasks.digits import held_out
from node.tasks.hub_math import write_fixture


def test_arith_items_are_rebuilt_from_their_reference():
    task = get_task("arith")
    a, b = task.item("train", 123), get_task("arith").item("train", 123)
    assert a == b and a.ref == TaskRef("arith", "1", "train", 123)
    assert len({task.item("train", i).prompt for i in range(50)}) > 40


def test_arith_splits_differ_in_difficulty():
    task = get_task("arith")
    def operands(split):
        out = []
        for i in range(200):
            prompt = task.item(split, i).prompt.rstrip("=")
            op = "+" if "+" in prompt else "-"
            out += [int(x) for x in prompt.split(op)]
        return out
    assert max(operands("train")) <= 19 and min(operands("test")) >= 20


def test_arith_answer_is_right_and_scoring_is_strict():
    task = get_task("arith-sub")
    item = task.item("train", 5)
    a, b = (int(x) for x in item.prompt.rstrip("=").split("-"))
    assert item.answer == str(a - b) and a >= b
    assert task.score(item, item.answer, finished=True) == 1.0
    assert task.score(item, f" {item.answer}.", finished=True) == 1.0
    assert task.score(item, f"\\boxed{{{item.answer}}}", finished=True) == 1.0
    assert task.score(item, item.answer, finished=False) == 0.0  # no EOS: format fails
    assert task.score(item, str(int(item.answer) + 1), finished=True) == 0.0
    assert task.score(item, item.answer + "0", finished=True) == 0.0
    assert task.score(item, f"{a} - {b} = {item.answer}.", finished=True) == 1.0
    assert task.score(item, f"{item.answer}, no: {int(item.answer) + 2}", finished=True) == 0.0
    assert task.score(item, "", finished=True) == 0.0


def test_arith_wide_holds_its_evaluation_out_by_content():
    """arith-wide: no training index yields a held-out problem, every evaluation item is one (so no held-out prompt
    is ever a training prompt), up to 2 digits in distribution and 3 out of it, answers right, both operators."""
    task = get_task("arith-wide")
    train = [task.problem("train", i) for i in range(3000)]
    assert not any(held_out(*p) for p in train)
    trained = {f"{a}{op}{b}=" for a, op, b in train}
    for split, digits in (("train", {1, 2}), ("test", {3})):
        evaluation = held_out_items(task, split, 256)
        assert all(held_out(*task.problem(split, item.ref.index)) for item in evaluation)
        assert not {item.prompt for item in evaluation} & trained
        assert {len(str(task.problem(split, item.ref.index)[0])) for item in evaluation} == digits
        assert {task.kind(item) for item in evaluation} == {"sum", "difference"}
        for item in evaluation:
            a, op, b = task.problem(split, item.ref.index)
            assert item.answer == str(a + b if op == "+" else a - b) and a >= b and item.prompt == f"{a}{op}{b}="
    assert {len(str(a)) for a, _, _ in train} == {1, 2}
    assert {op for _, op, _ in (get_task("arith-wide-sub").problem("train", i) for i in range(50))} == {"-"}


def test_arith_wide_is_scored_like_arith_and_resolves_offline():
    task = get_task("arith-wide-add")
    item = task.item("train", 7)
    assert item == get_task("arith-wide-add").item("train", 7)
    assert item.ref == TaskRef("arith-wide-add", "1", "train", 7)
    assert task.score(item, f"The sum is {item.answer}.", finished=True) == 1.0
    assert task.score(item, f"\\boxed{{{item.answer}}}", finished=True) == 1.0
    assert task.score(item, item.answer, finished=False) == 0.0
    assert task.score(item, str(int(item.answer) + 10), finished=True) == 0.0
    assert offline_task("arith-wide") is not None and offline_task("arith-wide").item("test", 3).prompt


def test_arith_work_asks_for_the_working_and_scores_the_final_answer():
    task = get_task("arith-work-add")
    item = task.item("train", 7)
    a, op, b = task.problem("train", 7)
    assert op == "+" and item.answer == str(a + b) and item.prompt == f"{a}+{b}="
    assert item.question == f"What is {a} + {b}? Work it out step by step, then give the answer."
    assert completion_cap(task) == 384 and completion_cap(get_task("arith-wide-add")) == 16
    working = f"Add the ones: {a % 10} + {b % 10}. Then the tens. So {a} + {b} = {item.answer}."
    assert task.score(item, working, finished=True) == 1.0
    assert task.score(item, f"{a} + {b} = {item.answer}, checking: {a + b + 1}", finished=True) == 0.0  # last integer
    assert task.score(item, working, finished=False) == 0.0  # cut at the cap
    train = {task.problem("train", i) for i in range(300)}
    assert not any(held_out(*p) for p in train)
    assert all(held_out(*task.problem("train", i.ref.index)) for i in held_out_items(task, "train", 64))
    assert offline_task("arith-work") is not None and "arith-work-sub" in task_names()


def test_reasoning_gym_task_uses_its_own_scorer():
    task = get_task("gym:chain_sum")
    item = task.item("train", 3)
    assert item == get_task("gym:chain_sum").item("train", 3)
    assert task.item("test", 3).question != item.question or task.item("test", 3).answer != item.answer
    assert task.score(item, item.answer, True) == 1.0
    assert task.score(item, "no idea", True) == 0.0
    assert task.score(item, str(int(item.answer) + 1), True) < 1.0  # reasoning-gym may give partial credit
    assert task.score(item, item.answer, finished=False) == 0.0


def test_unknown_tasks_are_refused():
    with pytest.raises(UnknownTaskError, match="unknown task 'nope'"):
        get_task("nope")
    with pytest.raises(UnknownTaskError, match="reasoning-gym task 'nope'"):
        get_task("gym:nope")


def test_gsm8k_fixture_in_hub_format_scored_with_math_verify(tmp_path):
    path = write_fixture("gsm8k", tmp_path / "gsm8k.jsonl")
    task = get_task("gsm8k", data_files=str(path))
    item = task.item("test", 2)
    assert item.answer == "2500" and "\\boxed" in item.question
    assert task.score(item, "She earns 2500 dollars, so \\boxed{2500}", True) == 1.0
    assert task.score(item, "The answer is \\boxed{2400}", True) == 0.0


def test_math500_fixture_accepts_equivalent_forms(tmp_path):
    path = write_fixture("math500", tmp_path / "math500.jsonl")
    task = get_task("math500", data_files=str(path))
    item = task.item("test", 0)
    assert item.answer == "\\frac{1}{2}"
    assert task.score(item, "So the sum is \\boxed{0.5}.", True) == 1.0
    assert task.score(item, "So the sum is \\boxed{\\frac{1}{3}}.", True) == 0.0


def test_count_task_lengths_vary_and_scoring_is_exact():
    task = get_task("count")
    items = [task.item("train", i) for i in range(100)]
    assert {len(it.answer) for it in items} == set(range(1, 10))
    item = next(it for it in items if len(it.answer) == 4)
    assert item.prompt == "to 4:" and item.answer == "1234"
    assert task.score(item, "1234", True) == 1.0
    assert task.score(item, "12345", True) == 0.0 and task.score(item, "1234", False) == 0.0
    assert task.score(item, "1234.~~~~~~~", True) == 1.0 and task.score(item, "12345.~", True) == 0.0
    assert all(10 <= len(task.item("test", i).answer) <= 15 for i in range(50))
    assert task.item("test", 0).answer.startswith("1234567890")
