"""Signed receipts (issue 55, 7): a receiver signs what it trained on of each generator's groups; the generator
keeps what checks out; nobody else can forge or inflate one; anyone can check one offline with real keys."""
import dataclasses
import subprocess
import sys

from node.swarm.memory import MemorySwarm
from node.swarm.receipts import Receipts, check_receipt, receipt_line, verify_line
from protocol.receipts import (
    Receipt,
    ReceiptError,
    ReceiptGroup,
    decode_receipt,
    encode_receipt,
    pack_signed,
    receipt_digest,
    unpack_signed,
)
from tests.fixtures import peer


def served_receipts(p) -> list[Receipt]:
    return [decode_receipt(unpack_signed(s)[0]) for s in p.exchange.credit.receipts.served]


def test_a_generator_is_credited_with_exactly_the_rows_its_receiver_signed_for():
    hub = MemorySwarm()
    a, b = peer(hub, "giver"), peer(hub, "taker", model="tiny-sub")
    for step in range(4):
        a.step(step)
        b.step(step)
    for step in range(4, 7):  # b has stopped: a reads its last announcement, pulls its receipts, takes them
        a.step(step)
    signed = [r for r in served_receipts(b) if r.generator == "giver"]
    assert signed and all(r.receiver == "taker" and r.receiver_key == b"taker" for r in signed)
    credit = a.exchange.credit.receipts.credit
    assert credit.groups == sum(len(r.groups) for r in signed) > 0
    assert credit.rows == sum(r.rows for r in signed) == 4 * credit.groups  # group size 4: every row in b's loss
    assert credit.receipts == len(signed) and credit.by_receiver == {"taker": credit.rows}
    assert credit.groups <= b.exchange.credit.given["giver"]  # (the last step's are signed with b's next announcement)
    assert a.credit()["rows"] == credit.rows and a.credit()["receivers"] == 1
    listed = {p["peer_id"]: p for p in a.known_peers()}
    assert listed["taker"]["receipted_rows"] == credit.rows


def _receipts_of(hub, name: str, **kw) -> Receipts:
    return Receipts(hub.transport(name), "arith", **kw)


def _signed(hub, signer: str, receipt: Receipt) -> bytes:
    body = encode_receipt(receipt)
    return pack_signed(body, hub.transport(signer).sign("receipt", receipt_digest(body)))


def test_receipts_cannot_be_forged_inflated_or_aimed_at_groups_never_published():
    hub = MemorySwarm()
    gen = _receipts_of(hub, "gen")
    gen.published_group(100.0, 7)
    gen.published_group(101.0, 9)
    honest = Receipt("rx", b"rx", "gen", 3, 102.0, "arith", (ReceiptGroup(7, 100.0, 4),))
    good = _signed(hub, "rx", honest)
    inflated = pack_signed(encode_receipt(dataclasses.replace(honest, groups=(ReceiptGroup(7, 100.0, 400),))),
                           unpack_signed(good)[1])  # rows changed, the receiver's signature kept
    forged = _signed(hub, "gen", dataclasses.replace(honest, receiver_key=b"gen"))  # the generator signs as rx
    unpublished = _signed(hub, "rx", dataclasses.replace(honest, groups=(ReceiptGroup(8, 100.0, 4),)))
    sybil = _signed(hub, "syb", dataclasses.replace(honest, receiver="syb", receiver_key=b"syb"))
    for bad, signer, receiver in ((inflated, b"rx", "rx"), (forged, b"rx", "rx"), (unpublished, b"rx", "rx"),
                                  (sybil, b"rx", "rx"), (b"\x00junk", b"rx", "rx")):
        assert not gen.take(bad, signer, receiver)  # (sybil: its own receipt, served as if rx's)
    assert gen.refused == 5 and gen.credit.rows == 0
    assert gen.take(good, b"rx", "rx") and not gen.take(good, b"rx", "rx")  # counted once
    again = _signed(hub, "rx", dataclasses.replace(honest, step=4, groups=(ReceiptGroup(7, 100.0, 4),
                                                                           ReceiptGroup(9, 101.0, 2))))
    assert gen.take(again, b"rx", "rx")  # a second receipt naming group 7 again: only group 9 is new
    assert (gen.credit.receipts, gen.credit.groups, gen.credit.rows) == (2, 2, 6)
    other = _signed(hub, "rx", dataclasses.replace(honest, generator="someone"))
    assert not gen.take(other, b"rx", "rx") and gen.refused == 5  # another generator's: not ours, not refused


def test_kept_receipts_survive_a_restart(tmp_path):
    hub = MemorySwarm()
    path = tmp_path / "receipts.jsonl"
    gen = _receipts_of(hub, "gen", path=path)
    gen.published_group(100.0, 7)
    assert gen.take(_signed(hub, "rx", Receipt("rx", b"rx", "gen", 3, 102.0, "arith", (ReceiptGroup(7, 100.0, 4),))),
                    b"rx", "rx")
    again = _receipts_of(hub, "gen", path=path)
    assert (again.credit.receipts, again.credit.rows, again.credit.by_receiver) == (1, 4, {"rx": 4})


def _real_receipt(tmp_path, rows: int = 5):
    """A receipt signed with a real identity key, as a DHT node signs (hivemind RSA), and its file line."""
    from hivemind.dht.crypto import RSASignatureValidator
    from hivemind.utils.crypto import RSAPrivateKey

    from node.swarm.dht import bundle_statement, peer_id_of

    key = RSAPrivateKey()
    subkey = RSASignatureValidator(key).local_public_key
    receipt = Receipt(peer_id_of(subkey), subkey, "QmGenerator", 12, 1000.0, "digits",
                      (ReceiptGroup(3, 990.0, rows), ReceiptGroup(4, 991.0, 2)))
    body = encode_receipt(receipt)
    signed = pack_signed(body, key.sign(bundle_statement("receipt", receipt_digest(body))))
    return receipt, signed


def test_a_receipt_verifies_offline_with_its_receivers_key_and_a_changed_one_does_not(tmp_path):
    receipt, signed = _real_receipt(tmp_path)
    assert verify_line(receipt_line(signed, receipt)) == receipt
    body, signature = unpack_signed(signed)
    changed = decode_receipt(body)
    for tampered in (dataclasses.replace(changed, groups=(ReceiptGroup(3, 990.0, 50), changed.groups[1])),
                     dataclasses.replace(changed, receiver="QmSomeoneElse")):
        line = receipt_line(pack_signed(encode_receipt(tampered), signature), tampered)
        try:
            verify_line(line)
            raise AssertionError("a changed receipt verified")
        except ReceiptError:
            pass
    # the pure check with the same callables: the signature, and a key that owns the receiver's peer id
    assert check_receipt(signed, lambda d, s, k: True, lambda k, p: p == receipt.receiver) == receipt


def test_swarm_credit_verify_prints_the_credit_and_fails_on_a_forged_line(tmp_path):
    receipt, signed = _real_receipt(tmp_path)
    good = tmp_path / "receipts.jsonl"
    good.write_text(receipt_line(signed, receipt) + "\n")
    run = subprocess.run([sys.executable, "swarm_cli.py", "credit", "verify", str(good)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert f"receiver {receipt.receiver} credits QmGenerator: 7 rows in 2 groups (1 receipts)" in run.stdout
    assert "1 receipts verified, 0 not" in run.stderr
    body, signature = unpack_signed(signed)
    inflated = dataclasses.replace(receipt, groups=(ReceiptGroup(3, 990.0, 500), receipt.groups[1]))
    bad = tmp_path / "forged.jsonl"
    bad.write_text(receipt_line(signed, receipt) + "\n"
                   + receipt_line(pack_signed(encode_receipt(inflated), signature), inflated) + "\n")
    run = subprocess.run([sys.executable, "swarm_cli.py", "credit", "verify", str(bad)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 1 and "line 2: not verified: a receipt whose signature is not its receiver's" in run.stderr
    assert "1 receipts verified, 1 not" in run.stderr
