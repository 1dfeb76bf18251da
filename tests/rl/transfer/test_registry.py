"""The registry: policies by name, auto's resolution, settings checked and typed; the [transfer] table."""
import pytest

from node.config import TransferConfig, build_config, load_config, write_config
from node.errors import ConfigError
from node.rl.transfer.policies.ftis import FTIS
from node.rl.transfer.registry import build_policy, registry, resolve, resolved_config


def test_every_policy_module_registers_its_policies():
    names = set(registry())
    assert {"alone", "nois", "tis", "vis", "f-nois", "f-vis", "f-tis", "f-tis-or", "success-gated",
            "verified-imitation"} <= names
    assert all(cls.summary and cls.__doc__ for cls in registry().values())  # each says what it does


def test_auto_is_verified_imitation_where_the_verifier_checks_the_work_else_f_tis():
    assert resolve("auto", checks_work=True) == "verified-imitation"
    assert resolve("auto", checks_work=False) == "f-tis"
    assert resolve("nois", checks_work=True) == "nois"
    assert build_policy(TransferConfig(), checks_work=False).name == "f-tis"


def test_settings_are_typed_from_the_policy_and_the_defaults_are_the_class_defaults():
    policy = build_policy(TransferConfig("f-tis", (("g", "10"), ("sequence_weights", "true"))), checks_work=True)
    assert isinstance(policy, FTIS) and policy.g == 10.0 and policy.sequence_weights is True
    assert policy.trunc_c == FTIS.trunc_c == 2.0
    assert resolved_config(policy) == TransferConfig("f-tis", (("g", 10.0), ("sequence_weights", True)))
    assert build_policy(resolved_config(policy), checks_work=True) == policy


@pytest.mark.parametrize("cfg, message", [
    (TransferConfig("f-tsi"), "did you mean f-tis"),
    (TransferConfig("f-tis", (("floor", 1.0),)), "transfer.floor is not a setting of policy f-tis"),
    (TransferConfig("vis", (("trunc_c", 3.0),)), "transfer.trunc_c is not a setting of policy vis"),
    (TransferConfig("nois", (("g", 3.0),)), "its settings: none"),
    (TransferConfig("f-tis", (("g", "ten"),)), "transfer.g must be a number"),
    (TransferConfig("f-tis", (("divergence", "max"),)), "divergence must be sum or mean"),
])
def test_a_bad_policy_or_setting_is_one_clear_error(cfg, message):
    with pytest.raises(ConfigError, match=message):
        build_policy(cfg, checks_work=True)


def test_the_transfer_table_holds_the_policy_and_its_settings(tmp_path):
    cfg = build_config({"transfer": {"policy": "verified-imitation", "floor": 2}})
    assert cfg.transfer == TransferConfig("verified-imitation", (("floor", 2),))
    assert load_config(write_config(cfg, tmp_path / "c.toml"), environ={}) == cfg
    env = load_config(environ={"SWARM_TRANSFER__POLICY": "f-tis", "SWARM_TRANSFER__G": "5"})
    assert build_policy(env.transfer, checks_work=True).g == 5.0


@pytest.mark.parametrize("key, where", [
    ("loss.variant", "transfer.policy"), ("loss.received_floor", "transfer.floor"), ("loss.g", "transfer.g"),
    ("swarm.received_baseline", "transfer.policy: greedy is policy verified-imitation"),
    ("loss.sender_bound", "trust.sender_bound"),
    ("swarm.demote_steps", "trust.demote_steps"),
])
def test_a_setting_that_moved_says_where_it_is_now(key, where):
    section, name = key.split(".")
    with pytest.raises(ConfigError, match=f"{key} has moved: use {where}"):
        build_config({section: {name: "1"}})


def test_a_peer_says_what_its_policy_does_and_what_it_cannot_do_on_its_task():
    from node.config import build_config
    from node.peer import Peer
    from node.swarm.memory import MemorySwarm

    hub = MemorySwarm()
    lines = {}
    for task, model in (("digits", "digit-add"), ("arith", "tiny-add")):
        cfg = build_config({"model": {"name": model}, "task": {"name": task},
                            "transfer": {"policy": "verified-imitation", "floor": 2}})
        peer = Peer(cfg, transport=hub.transport(task))
        try:
            lines[task] = peer.transfer_line()
        finally:
            peer.close()
    assert lines["digits"].startswith("transfer verified-imitation (floor = 2.0): a partner's right answers")
    assert "no received row is lifted" not in lines["digits"]
    assert lines["arith"].endswith("(this task's verifier reads only the answer: no received row is lifted)")
    alone = Peer(build_config({"model": {"name": "tiny-add"}, "task": {"name": "arith"}}))
    try:
        assert alone.transfer_line() == "transfer f-tis: no swarm, our own groups only"
    finally:
        alone.close()
