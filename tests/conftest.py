import pytest
import torch

# Seconds each heavy file takes on one worker of this 2-core machine (`pytest -n 2 --durations=0`, sums per file,
# rounded, without the Gemma tests CI skips; 2026-12-07): the README's command hands whole files to its two workers
# (--dist loadfile, pyproject.toml) heaviest first, so that a module's shared swarm starts once and no long file
# starts last. A file not listed costs little.
FILE_SECONDS = {
    "tests/swarm/test_hostile_process.py": 275, "tests/generation/test_vllm_backend.py": 175,
    "tests/test_checkpoint.py": 115, "tests/test_cli.py": 100, "tests/test_evaluation.py": 95,
    "tests/test_cli_network.py": 95, "tests/models/test_real_model.py": 85, "tests/swarm/test_hostile_poison.py": 80,
    "tests/test_swarm_loopback.py": 75, "tests/test_dashboard.py": 60, "tests/swarm/test_hostile_swarm.py": 60,
    "tests/test_peer_learns.py": 55, "tests/swarm/test_sybil.py": 55, "tests/swarm/test_intake.py": 50,
    "tests/test_sim_discovery.py": 35, "tests/test_gpu_recipe.py": 30, "tests/test_paper_tables.py": 30,
    "tests/swarm/test_newcomer.py": 27, "tests/models/test_prompt_encoding.py": 26, "tests/swarm/test_nat.py": 25,
    "tests/test_export.py": 16, "tests/swarm/test_blackout.py": 13,
}


def by_file_cost(items: list) -> list:
    """Items with whole files in descending FILE_SECONDS (stable: collection order within and among the rest)."""
    order = {}
    for item in items:
        order.setdefault(item.nodeid.split("::")[0], len(order))
    return sorted(items, key=lambda item: (-FILE_SECONDS.get(item.nodeid.split("::")[0], 0),
                                           order[item.nodeid.split("::")[0]]))


def pytest_collection_modifyitems(config, items):
    """Heaviest files first (FILE_SECONDS). Tests marked pins_zoo assert what the shipped zoo's weights do;
    against another zoo (SWARM_ZOO_DIR, e.g. `swarm zoo build --out DIR --seed-offset 100`: what another
    machine's build might be) they are skipped, saying why. Every other test constructs what it asserts on and
    passes on any zoo."""
    from node.models.zoo_store import active_zoo, is_shipped

    items[:] = by_file_cost(items)
    zoo = active_zoo()
    if is_shipped(zoo):
        return
    for item in items:
        marker = item.get_closest_marker("pins_zoo")
        if marker is not None:
            why = marker.args[0] if marker.args else "asserts what the shipped weights do"
            item.add_marker(pytest.mark.skip(reason=f"pins the shipped zoo ({why}); {zoo} is another zoo"))


@pytest.fixture(autouse=True)
def _one_thread():
    """Tests share 2 cores with other processes: one torch thread each (two threads on two busy cores run many
    times slower)."""
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny():
    """The zoo's tiny-add model and tokenizer (built once per machine, then cached)."""
    from node.config import ModelConfig
    from node.models.loading import load_model

    torch.set_num_threads(1)
    loaded = load_model(ModelConfig(name="tiny-add"))
    return loaded.model, loaded.tokenizer


@pytest.fixture(scope="session")
def sampled_groups():
    """make(backend, tokenizer, task_name, prompts, group_size, seed=0) -> own groups the backend samples for
    the task's first train items, scored by the task's verifier, each with a learning signal by construction:
    its first completion rewarded 1 and its second 0, whatever the weights sampled (a learner step on them has
    a gradient on any zoo)."""
    from node.generation.rollouts import Group, score_group
    from node.models.loading import encode_prompt
    from node.tasks import get_task

    def make(backend, tokenizer, task_name: str, prompts: int, group_size: int, seed: int = 0) -> list:
        task = get_task(task_name)
        items = [task.item("train", i) for i in range(prompts)]
        ids = [encode_prompt(tokenizer, item) for item in items]
        outputs, seconds = backend.generate(ids, group_size, seed=seed)
        groups = [Group(item, p, comps, seconds) for item, p, comps in zip(items, ids, outputs, strict=True)]
        for group in groups:
            score_group(task, group)
            group.completions[0].reward, group.completions[1].reward = 1.0, 0.0
        return groups

    return make


@pytest.fixture(scope="session")
def transfer_policy():
    """A transfer policy by name and settings (node/rl/transfer), on a task whose verifier checks the work."""
    from node.config import TransferConfig
    from node.rl.transfer.registry import build_policy

    def make(name: str = "f-tis", **settings):
        return build_policy(TransferConfig(name, tuple(sorted(settings.items()))), checks_work=True)

    return make


@pytest.fixture
def ledger():
    """A sender ledger (node/swarm/senders.py) that knows the given senders, each an identity named as its peer
    id, announced until t = 1000."""
    import random

    from node.config import TrustConfig
    from node.swarm.senders import SenderLedger
    from protocol.codec import Announcement, BundleRef, WireCard, bundle_digest

    def make(*senders: bytes, trust: TrustConfig | None = None) -> SenderLedger:
        book = SenderLedger(capacity=100, rng=random.Random(0), trust=trust)
        card = WireCard("qwen2", 1, False, "fp", 99, "transformers", 1.0, 1.0, "0")
        for sender in senders:
            ref = BundleRef(bundle_digest(sender), 10, 1)
            book.learn(sender, Announcement(sender.decode(), (), 0, 100.0, card, ref, ref), expires=1000.0)
        return book

    return make
