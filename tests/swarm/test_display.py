"""What a node prints of other peers' claims (node/swarm/display.py): nothing invisible or reordering gets through,
absurd numbers are marked."""
from node.swarm.display import MAX_STEP, safe_count, safe_params, safe_text


def test_invisible_and_reordering_characters_are_written_out():
    assert safe_text("qwen2") == "qwen2"
    assert safe_text("qwen\u202e2gnirts") == "qwen\\u202e2gnirts"  # a right-to-left override
    assert safe_text("a\x1b[2Jb\nc\u200bd") == "a\\u001b[2Jb\\u000ac\\u200bd"  # terminal escape, newline, zero width
    assert safe_text("x" * 100, limit=10) == "xxxxxxx..."
    assert safe_text("Qwen/Qwen2.5-0.5B") == "Qwen/Qwen2.5-0.5B"


def test_absurd_numbers_are_marked_as_claims():
    assert safe_count(12, MAX_STEP) == "12"
    assert safe_count(2**64 - 1, MAX_STEP) == "18446744073709551615 (implausible)"
    assert safe_count(-1, MAX_STEP) == "-1 (implausible)"
    assert safe_params(134_515_008) == "134.52M"
    assert safe_params(10**15) == "1000000000000000 parameters (implausible)"


def test_the_bootstrap_lists_peers_by_when_it_read_them_not_by_their_stamps():
    from node.app.runner import SwarmWatch
    from protocol.codec import Announcement, BundleRef, WireCard, encode_announcement

    card = WireCard("qwen2", 1, False, "fp", 64, "transformers", 1.0, 1.0, "0.1.0")
    ref = BundleRef(b"d" * 16, 10, 1)

    def record(peer: str, created: float) -> bytes:
        return encode_announcement(Announcement(peer, (), 0, created, card, ref, ref))

    watch = SwarmWatch()
    watch.observe({b"honest": (record("honest", 100.0), 999.0)}, now=100.0)
    # a later reader stamps itself an hour ahead to sort first: it is listed by when we read it
    watch.observe({b"honest": (record("honest", 100.0), 999.0), b"liar": (record("liar", 3700.0), 999.0)}, now=101.0)
    watch.observe({b"honest": (record("honest", 102.0), 999.0), b"liar": (record("liar", 3700.0), 999.0)}, now=102.0)
    listed = watch.peer_list(now=110.0)
    assert [p["peer_id"] for p in listed] == ["honest", "liar"]  # honest re-announced last
    assert [p["age"] for p in listed] == [8.0, 9.0]  # seconds since we read each
