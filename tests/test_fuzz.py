"""Property-based fuzzing of every decoder a stranger reaches (bench/attacks/fuzz.py has the targets and runs 10^6
inputs): on any bytes, and on any mutation of what honest peers send, each decoder returns or refuses with the
protocol's own error; it never raises anything else. Honest encodings decode."""
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.attacks import fuzz

CORPUS = fuzz.seed_corpus()
SHORT = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)


@pytest.mark.parametrize("name", sorted(fuzz.TARGETS))
def test_what_honest_peers_send_decodes(name):
    for data in CORPUS[name]:
        assert fuzz.run_target(name, data) == "ok", name


@pytest.mark.parametrize("name", sorted(fuzz.TARGETS))
@SHORT
@given(data=st.binary(max_size=2048))
def test_any_bytes_are_decoded_or_refused(name, data):
    assert fuzz.run_target(name, data).split(":")[0] in ("ok", "refused")


@pytest.mark.parametrize("name", sorted(fuzz.TARGETS))
@SHORT
@given(seed=st.integers(0, 2**32 - 1), pick=st.integers(0, 7))
def test_any_mutation_of_an_honest_encoding_is_decoded_or_refused(name, seed, pick):
    corpus = CORPUS[name]
    rng = random.Random(seed)
    data = fuzz.mutate(rng, corpus[pick % len(corpus)], corpus)
    assert fuzz.run_target(name, data).split(":")[0] in ("ok", "refused")


def test_the_bench_finds_no_crash_and_no_growth_in_a_short_run(capsys):
    assert fuzz.main(["--inputs", "8000", "--seed", "1"]) == 0
    table = capsys.readouterr().out
    assert table.count("| 0 |") >= len(fuzz.TARGETS)  # a zero crash count in every row
