"""bench/experiments/error_kinds.py's classifier: the first wrong step of a column-arithmetic completion, by kind."""
from bench.experiments.error_kinds import first_mistake
from node.tasks.digits import worked

SUM = (703567, "+", 578)
RIGHT = worked(*SUM, 1.0)[0]  # 7+8=15,6+7+1=14,5+5+1=11,3+1=4,0=0,7=7;704145


def test_right_working_is_right():
    assert RIGHT == "7+8=15,6+7+1=14,5+5+1=11,3+1=4,0=0,7=7;704145"
    assert first_mistake(RIGHT, *SUM) == "right"
    assert first_mistake(RIGHT.replace(",", ", "), *SUM) == "right"  # spacing is not a mistake


def test_each_kind_of_first_mistake():
    assert first_mistake("7+8=15,6+7+1=14,5+7+1=10,3+1=4,6=6,7=7;764025", *SUM) == "operand digit misread"
    assert first_mistake("7+8=15,6+7=13,5+5=10,3+1=4,0=0,7=7;704035", *SUM) == "carry / borrow term"
    assert first_mistake("7+8=15,6+7+1=15,5+5+1=11,3+1=4,0=0,7=7;704155", *SUM) == "step arithmetic"
    assert first_mistake("7+8=15,6+7+1=14,5+5+1=11,3+1=4,0=0;04145", *SUM) == "number of steps"
    assert first_mistake("7+8=15,6+7+1=14,5+5+1=11,3+1=4,0=0,7=7;704146", *SUM) == "answer after right steps"
    # only the first mistake counts: a misread after a dropped carry is a carry mistake
    assert first_mistake("7+8=15,6+7=13,9+5=14,3+1=4,0=0,7=7;704435", *SUM) == "carry / borrow term"


def test_differences_single_digit_steps():
    difference = (788474, "-", 91)
    right = worked(*difference, 1.0)[0]
    assert right == "4-1=3,17-9=8,4-1=3,8=8,8=8,7=7;788383"
    assert first_mistake("4-1=3,17-9=8,4-1=3,7=7,7=7,7=7;777383", *difference) == "operand digit misread"
    assert first_mistake("4-1=3,17-9=8,4=4,8=8,8=8,7=7;788483", *difference) == "carry / borrow term"
    assert first_mistake("4-1=3,7-9=8,4-1=3,8=8,8=8,7=7;788383", *difference) == "carry / borrow term"  # no ten lent
    # a carry after the shorter operand ends: "3+1" is the digit and the carry
    assert first_mistake("7+8=15,6+7+1=14,5+5+1=11,3=3,0=0,7=7;703145", *SUM) == "carry / borrow term"
    assert first_mistake("7+8=15,6+7+1=14,5+5+1=11,5+1=6,0=0,7=7;706145", *SUM) == "operand digit misread"


def test_checked_completions_are_read_past_their_checks():
    # digits-check: the work and answer, then checks; a false check after the right work is its own kind
    assert first_mistake(RIGHT + "|704145-578=703567|704145-703567=578", *SUM) == "right"
    assert first_mistake(RIGHT + "|704145-578=703567|704145-703567=577", *SUM) == "a check"
    assert first_mistake("7+8=15,6+7=13,5+5=10,3+1=4,0=0,7=7;704035|704035-578=703457", *SUM) == \
        "carry / borrow term"
    assert first_mistake(RIGHT.replace("704145", "704146") + "|704146-578=703568", *SUM) == \
        "answer after right steps"


def test_trained_errors_sums_a_cells_counts_over_seeds():
    import collections

    from bench.experiments.error_kinds import by_operator
    from bench.experiments.trained_errors import summed, table

    one = by_operator(collections.Counter({("+", "right"): 3, ("+", "carry / borrow term"): 1, ("-", "a check"): 2}))
    two = by_operator(collections.Counter({("+", "right"): 1, ("-", "operand digit misread"): 4}))
    runs = [{"label": "Alone", "peers": {"check-add": {"test": one}}},
            {"label": "Alone", "peers": {"check-add": {"test": two}}},
            {"label": "verified-imitation", "peers": {"check-add": {"test": two}}}]
    got = summed(runs, "Alone", "check-add", "test")
    assert got["+"]["right"] == 4 and got["+"]["carry / borrow term"] == 1
    assert got["-"]["a check"] == 2 and got["-"]["operand digit misread"] == 4
    assert summed(runs, "Alone", "check-sub", "test")["+"]["right"] == 0  # a peer the cell did not run
    lines = table([("check-add", "Alone", "test", got)]).splitlines()
    assert lines[2] == "| check-add | Alone | OOD | + | 5 | 4 | 0 | 1 | 0 | 0 | 0 | 0 |"
    assert lines[3] == "| check-add | Alone | OOD | - | 6 | 0 | 4 | 0 | 0 | 0 | 0 | 2 |"


def test_column_outcomes_score_each_column_reached_with_right_steps_before_it():
    from bench.experiments.error_kinds import carries_in, column_outcomes

    # 703567 + 578: columns 2, 3 and 4 take a carry in; the thousands' "3+1" is a carry after 578 ends
    assert [carries_in(*SUM, c) for c in range(6)] == [False, True, True, True, False, False]
    assert column_outcomes(RIGHT, *SUM) == [(0, False, True), (1, True, True), (2, True, True), (3, True, True),
                                            (4, False, True), (5, False, True)]
    # the carry dropped at column 2: scored there, nothing after it
    assert column_outcomes("7+8=15,6+7=13,5+5=10,3+1=4,0=0,7=7;704035", *SUM) == [(0, False, True), (1, True, False)]
    assert column_outcomes("nothing", *SUM) == [(0, False, False)]
    assert column_outcomes("7+8=15", *SUM)[-1] == (1, True, False)  # stopped early: the missing step is wrong
    # a difference: the borrow comes in at the column after the one that lent ten
    difference = (788474, "-", 91)
    assert [carries_in(*difference, c) for c in range(6)] == [False, False, True, False, False, False]


def test_column_counts_and_their_table():
    from bench.experiments.error_kinds import column_counts
    from bench.experiments.trained_errors import column_table, summed_columns

    done = [(*SUM, RIGHT, True), (*SUM, "7+8=15,6+7=13,5+5=10,3+1=4,0=0,7=7;704035", False)]
    counts = column_counts(done)
    assert counts["+"]["carry"] == {"1": [2, 1], "2": [1, 1], "3": [1, 1]}
    assert counts["+"]["no carry"] == {"0": [2, 2], "4": [1, 1], "5": [1, 1]}
    assert counts["-"] == {"carry": {}, "no carry": {}}
    runs = [{"label": label, "columns": {"m": {"test": counts}}} for label in ("Alone", "Alone", "other")]
    both = summed_columns(runs, "Alone", "m", "test")
    assert both["+"]["carry"]["1"] == [4, 2]
    lines = column_table([("m", "Alone", "test", both)]).splitlines()
    assert lines[2] == "| m | Alone | OOD | + | 2/4 = 0.50 | 2/2 = 1.00 | 2/2 = 1.00 | - | - | 4/4 = 1.00 |"
    assert lines[3] == "| m | Alone | OOD | - | - | - | - | - | - | - |"
