import pytest

from node.config import build_config, env_assignments, load_config, parse_assignments
from node.errors import ConfigError


def test_defaults_are_the_documented_ones():
    cfg = build_config()
    assert cfg.loss.variant == "f-tis" and cfg.loss.trunc_c == 2.0 and cfg.loss.g == 50.0
    assert cfg.loss.eps_low == 0.2 and cfg.loss.divergence == "sum" and cfg.generation.threads == 1


@pytest.mark.parametrize("section, name, value, field", [
    ("loss", "trunc_c", -1, "loss.trunc_c"),
    ("loss", "variant", "bogus", "loss.variant"),
    ("loss", "divergence", "max", "loss.divergence"),
    ("generation", "top_p", 1.5, "generation.top_p"),
    ("generation", "temperature", 0, "generation.temperature"),
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
    path.write_text('[loss]\ntrunc_c = 3.0\nvariant = "tis"\n[train]\nsteps = 7\n')
    env = {"SWARM_LOSS__TRUNC_C": "4", "SWARM_TRAIN__STEPS": "9", "HOME": "/x"}
    cfg = load_config(path, parse_assignments(["train.steps=11"]), environ=env)
    assert (cfg.loss.variant, cfg.loss.trunc_c, cfg.train.steps) == ("tis", 4.0, 11)
    assert env_assignments(env) == {"loss": {"trunc_c": "4"}, "train": {"steps": "9"}}


def test_bad_files_and_assignments(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml", environ={})
    bad = tmp_path / "bad.toml"
    bad.write_text("[loss\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad, environ={})
    with pytest.raises(ConfigError, match="section.field=value"):
        parse_assignments(["steps=3"])
