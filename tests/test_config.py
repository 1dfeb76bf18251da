import pytest

from node.config import build_config, config_from_args, env_assignments, load_config, parse_assignments, write_config
from node.errors import ConfigError


def test_defaults_are_the_documented_ones():
    cfg = build_config()
    assert cfg.transfer.policy == "auto" and cfg.transfer.options == () and cfg.loss.aggregation == "grpo"
    assert cfg.loss.eps_low == 0.2 and cfg.trust.sender_bound == 20.0 and cfg.generation.threads == 1


def test_received_groups_are_imitated_only_where_the_verifier_checks_the_work():
    """transfer.policy = auto: verified-imitation on a task whose verifier checks the work (digits), f-tis on one
    that reads only the answer (arith); the peer writes the policy it resolved into its configuration; the rows
    the floor may lift are the checked ones."""
    from node.generation.rollouts import Completion, Group, Received
    from node.peer import Peer
    from node.rl.batching import build_batch
    from node.tasks import checks_work, get_task

    assert [checks_work(get_task(n)) for n in ("digits", "digits-add", "arith", "arith-add", "count")] == [
        True, True, False, False, False]
    for task, model, expected in (("digits", "digit-add", "verified-imitation"), ("arith", "tiny-add", "f-tis")):
        peer = Peer(build_config({"model": {"name": model}, "task": {"name": task}}))
        try:
            assert peer.transfer.name == peer.cfg.transfer.policy == expected
        finally:
            peer.close()
    item = get_task("digits").item("train", 0)
    received = [Received(Group(item, [1, 2], [Completion([3], [-0.5], "stop", "", 1.0),
                                              Completion([4], [-0.5], "stop", "", 0.0)]), b"s", work_checked=checked)
                for checked in (True, False)]
    batch = build_batch([], received, 0, lambda rewards, _: [0.0] * len(rewards), False)
    assert batch.work_checked.tolist() == [True, True, False, False]


def test_the_completion_cap_defaults_to_the_tasks_own():
    from node.config import GenerationConfig, with_completion_cap
    from node.generation.transformers_backend import TransformersBackend
    from node.peer import Peer
    from node.tasks import completion_cap, get_task

    assert build_config().generation.max_new_tokens == 0  # 0: the task's cap
    assert [completion_cap(get_task(n)) for n in ("digits", "digits-sub", "arith", "count")] == [64, 64, 8, 8]
    cfg = build_config({"task": {"name": "digits"}})
    assert with_completion_cap(cfg, 64).generation.max_new_tokens == 64
    mine = build_config({"task": {"name": "digits"}, "generation": {"max_new_tokens": 12}})
    assert with_completion_cap(mine, 64) == mine  # a cap the user set stays
    peer = Peer(build_config({"model": {"name": "digit-add"}, "task": {"name": "digits"}}))
    try:
        assert peer.cfg.generation.max_new_tokens == 64 and peer.backend.sampling.max_new_tokens == 64
        assert peer.exchange is None
    finally:
        peer.close()
    arith_eval = Peer(build_config({"model": {"name": "tiny-add"}, "task": {"name": "arith"},
                                    "eval": {"task": "digits"}}))  # trained on arith, scored on digits: 64
    try:
        assert arith_eval.cfg.generation.max_new_tokens == 64
    finally:
        arith_eval.close()
    with pytest.raises(ValueError, match="with_completion_cap"):
        TransformersBackend(peer.loaded.model, peer.loaded.tokenizer, GenerationConfig())


@pytest.mark.parametrize("section, name, value, field", [
    ("loss", "eps_low", -1, "loss.eps_low"),
    ("loss", "aggregation", "bogus", "loss.aggregation"),
    ("trust", "sender_bet", 1.0, "trust.sender_bet"),
    ("trust", "demote_steps", 0, "trust.demote_steps"),
    ("transfer", "policy", "", "transfer.policy"),
    ("generation", "top_p", 1.5, "generation.top_p"),
    ("generation", "temperature", 0, "generation.temperature"),
    ("generation", "max_new_tokens", -1, "generation.max_new_tokens"),
    ("train", "group_size", 1, "train.group_size"),
    ("train", "lr", "fast", "train.lr"),
    ("model", "lora", "maybe", "model.lora"),
    ("sagc", "tau", 1.0, "sagc.tau"),
    ("sagc", "delta", 0.0, "sagc.delta"),
    ("sagc", "delta", 1.0, "sagc.delta"),
    ("sagc", "candidates", [], "sagc.candidates"),
    ("sagc", "candidates", [16, 8], "sagc.candidates"),
    ("sagc", "candidates", "4,x", "sagc.candidates"),
    ("sagc", "gamma", 0.0, "sagc.gamma"),
    ("sagc", "gamma", 1.01, "sagc.gamma"),
    ("eval", "samples", -1, "eval.samples"),
])
def test_invalid_values_name_the_field(section, name, value, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        build_config({section: {name: value}})


def test_candidate_lists_from_toml_or_flags():
    assert build_config({"sagc": {"candidates": [2, 6]}}).sagc.candidates == (2, 6)
    assert build_config({"sagc": {"candidates": "4, 8,16"}}).sagc.candidates == (4, 8, 16)


def test_unknown_names_are_refused():
    with pytest.raises(ConfigError, match="loss.bogus"):
        build_config({"loss": {"bogus": 1}})
    with pytest.raises(ConfigError, match=r"unknown configuration section \[nope\]"):
        build_config({"nope": {}})


def test_precedence_file_then_env_then_flags(tmp_path):
    path = tmp_path / "peer.toml"
    path.write_text('[loss]\neps_high = 0.3\n[transfer]\npolicy = "tis"\n[train]\nsteps = 7\n')
    env = {"SWARM_LOSS__EPS_HIGH": "0.28", "SWARM_TRAIN__STEPS": "9", "HOME": "/x"}
    cfg = load_config(path, parse_assignments(["train.steps=11"]), environ=env)
    assert (cfg.transfer.policy, cfg.loss.eps_high, cfg.train.steps) == ("tis", 0.28, 11)
    assert env_assignments(env) == {"loss": {"eps_high": "0.28"}, "train": {"steps": "9"}}


def test_bad_files_and_assignments(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml", environ={})
    bad = tmp_path / "bad.toml"
    bad.write_text("[loss\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad, environ={})
    with pytest.raises(ConfigError, match="section.field=value"):
        parse_assignments(["steps=3"])


def test_every_subcommand_resolves_through_the_same_path(tmp_path, monkeypatch):
    """Subcommand defaults < file < environment < named flags < --set, for join, bootstrap and local alike."""
    import swarm_cli
    from node.app.local_swarm import LOCAL_DEFAULTS

    path = tmp_path / "swarm.toml"
    path.write_text('[swarm]\nname = "from-file"\nport = 4000\n[train]\nprompts_per_step = 5\n')
    monkeypatch.setenv("SWARM_SWARM__HOST", "0.0.0.0")
    parser = swarm_cli.build_parser()
    join = config_from_args(parser.parse_args(["join", "--config", str(path), "--port", "4001"]),
                            swarm_cli.JOIN_DEFAULTS)
    assert (join.swarm.name, join.swarm.host, join.swarm.port, join.train.steps) == ("from-file", "0.0.0.0", 4001, 0)
    boot = config_from_args(parser.parse_args(["bootstrap", "--config", str(path)]), swarm_cli.BOOTSTRAP_DEFAULTS)
    assert (boot.swarm.name, boot.swarm.host, boot.swarm.port) == ("from-file", "0.0.0.0", 4000)
    assert boot.swarm.identity.endswith("bootstrap.id")
    assert config_from_args(parser.parse_args(["bootstrap"]), swarm_cli.BOOTSTRAP_DEFAULTS).swarm.port == 31330
    local = config_from_args(parser.parse_args(["local", "--config", str(path), "--prompts", "6",
                                                "--set", "train.prompts_per_step=7"]), LOCAL_DEFAULTS)
    assert (local.train.prompts_per_step, local.train.steps, local.swarm.received_groups) == (7, 150, 8)


def test_a_written_configuration_reads_back_equal(tmp_path):
    cfg = build_config({"sagc": {"candidates": "4,8"}, "swarm": {"initial_peers": "/ip4/1.2.3.4/tcp/1/p2p/x"},
                        "model": {"lora": "true"}, "loss": {"eps_high": "0.28"},
                        "transfer": {"policy": "f-tis", "g": "10"}})
    assert load_config(write_config(cfg, tmp_path / "cfg.toml"), environ={}) == cfg


def test_a_top_level_key_is_named_as_such():
    with pytest.raises(ConfigError, match=r"key 'steps' is not inside a section.*did you mean \[train\] steps"):
        build_config({"steps": 3})
    with pytest.raises(ConfigError, match=r"section \[train\] must be a table"):
        build_config({"train": 3})
