"""The view bundle (protocol/view.py): round trip, and every malformed shape refused by reason."""
import msgpack
import pytest

from protocol.codec import RecordError
from protocol.view import MAX_VIEW_BYTES, MAX_VIEW_ENTRIES, SignedAnnouncement, pack_view, unpack_view


def entry(i: int) -> SignedAnnouncement:
    return SignedAnnouncement(b"[owner:key%d]" % i, b"announcement %d" % i, b"signature %d" % i)


def test_a_view_round_trips_and_keeps_at_most_its_entry_limit():
    entries = [entry(i) for i in range(MAX_VIEW_ENTRIES + 3)]
    assert unpack_view(pack_view(entries)) == entries[:MAX_VIEW_ENTRIES]
    assert unpack_view(pack_view([])) == []
    with pytest.raises(ValueError):
        pack_view([SignedAnnouncement(b"k", b"v" * 5000, b"s")])


@pytest.mark.parametrize("data, reason", [
    (b"\xc1", "malformed"),  # not msgpack
    (msgpack.packb({"a": 1}), "malformed"),  # a map
    (msgpack.packb(b"bytes"), "malformed"),  # not a list
    (msgpack.packb([[b"k", b"v"]]), "malformed"),  # two fields
    (msgpack.packb([[b"k", "v", b"s"]]), "malformed"),  # a text field
    (msgpack.packb([[b"", b"v", b"s"]]), "malformed"),  # no identity
    (msgpack.packb([[b"k", b"v" * 3000, b"s"]]), "malformed"),  # an announcement over MAX_ANNOUNCEMENT
    (msgpack.packb([[b"k", b"v", b"s"]] * (MAX_VIEW_ENTRIES + 1)), "malformed"),  # too many entries
    (b"\x00" * (MAX_VIEW_BYTES + 1), "oversize"),
])
def test_malformed_views_are_refused_by_reason(data, reason):
    with pytest.raises(RecordError) as err:
        unpack_view(data)
    assert err.value.reason == reason
