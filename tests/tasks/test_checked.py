"""Checked column arithmetic: exact checks, a reward that needs every check true, the heavy tail pre-training
draws, digits' held-out partition, and groups whose lengths straggle where digits' never do."""
import collections
import random
import statistics

from node.evaluation import held_out_items
from node.models.pretrain import example
from node.models.tokenizer import build_tokenizer
from node.sagc.controller import straggles
from node.tasks import get_task
from node.tasks.checked import MAX_CHECKS, checked_label, checks, draw_checks, inverse_checks
from node.tasks.digits import held_out, parse_prompt, worked


def test_checks_are_the_answers_inverse_equations():
    assert inverse_checks(4821, "+", 397, 5218) == ("5218-397=4821", "5218-4821=397")
    assert inverse_checks(4821, "-", 397, 4424) == ("4424+397=4821", "4821-4424=397")
    assert checks(4821, "+", 397, 5218, 3) == "|5218-397=4821|5218-4821=397|5218-397=4821"
    assert checked_label(4821, "+", 397, 1) == "1+7=8,2+9=11,8+3+1=12,4+1=5;5218|5218-397=4821"
    assert checked_label(4821, "+", 397, 0) == worked(4821, "+", 397)[0]


def test_reward_needs_the_work_the_answer_and_every_check():
    task = get_task("digits-check")
    item = next(task.item("train", i) for i in range(100) if "+" in task.item("train", i).prompt)
    a, op, b = parse_prompt(item.prompt)
    for count in (0, 1, 5):
        assert task.score(item, checked_label(a, op, b, count), True) == 1.0
    assert task.score(item, checked_label(a, op, b, 2), False) == 0.0  # cut at the cap
    assert task.score(item, checked_label(a, op, b, 2, skill=0.0), True) == 0.0  # a slipped carry
    right = checked_label(a, op, b, 1)
    assert task.score(item, right + f"|{a}+{b}={int(item.answer) + 1}", True) == 0.0  # a false check
    assert task.score(item, right + "|1+1=2", True) == 0.0  # a true equation, not this answer's check
    assert task.score(item, right.replace(";", ";" + "0"), True) == 0.0  # a padded answer
    assert task.score(item, f"The answer is {item.answer}.", True) == 1.0  # free text: scored as digits does


def test_pretraining_draws_a_heavy_tail_of_checks():
    """Half the labels make no check; of those that do, P(at least k) falls as 1 / k, cut at MAX_CHECKS."""
    rng = random.Random(0)
    counts = collections.Counter(draw_checks(rng) for _ in range(40000))
    assert set(counts) == set(range(MAX_CHECKS + 1))
    assert abs(counts[0] / 40000 - 0.5) < 0.01
    some = 40000 - counts[0]
    at_least = {k: sum(n for c, n in counts.items() if c >= k) / some for k in (2, 3, 5)}
    cut = 1 / (MAX_CHECKS + 1)  # the drawn tail is renormalised over 1..MAX_CHECKS
    for k, share in at_least.items():
        assert abs(share - (1 / k - cut) / (1 - cut)) < 0.02, (k, share)
    prompt, label = example("digits-check-add", random.Random(3), accuracy=1.0)
    a, op, b = parse_prompt(prompt)
    assert op == "+" and label.startswith(worked(a, op, b)[0])


def test_held_out_like_digits():
    """The held-out items are on digits' held-out side of the partition, no training item is; prompts differ
    from digits' (each task draws its own), the partition is the same."""
    task = get_task("digits-check")
    evaluation = held_out_items(task, "train", 256)
    assert all(held_out(*parse_prompt(i.prompt)) for i in evaluation)
    assert not any(held_out(*task.problem("train", i)) for i in range(2000))
    assert [task.item("train", i).prompt for i in range(20)] != [get_task("digits").item("train", i).prompt
                                                                 for i in range(20)]


def test_groups_of_pretraining_habits_straggle_and_digits_never_do():
    """Groups of 16 labels of one prompt, checks drawn as pre-training draws them, in the zoo's BPE tokens:
    most straggle at tau 2 (max > 2 x median), at G = 4 far fewer; digits' labels of one prompt are one length."""
    tokenizer = build_tokenizer("bpe")
    task = get_task("digits-check")
    rng = random.Random(0)

    def rate(size):
        hits = []
        for i in range(200):
            a, op, b = task.problem("train", i)
            lengths = [len(tokenizer(checked_label(a, op, b, draw_checks(rng))).input_ids) + 1 for _ in range(size)]
            hits.append(straggles(max(lengths), statistics.median(lengths), 2.0))
        return statistics.mean(hits)

    assert rate(16) > 0.7 and rate(4) < 0.45
    cap = task.max_new_tokens
    longest = max(len(tokenizer(checked_label(*task.problem(split, i), MAX_CHECKS)).input_ids) + 1
                  for split in ("train", "test") for i in range(300))
    assert longest <= cap  # the cap leaves the whole tail visible
