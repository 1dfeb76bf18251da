"""The attack catalogue: what a hostile volunteer can publish, built with the real wire format.

Used by the hostile-peer tests and by bench/attacks/catalogue.py (docs/SECURITY.md has the threat model and the
measured table). Every builder returns what a hostile peer would publish: encoded records, packed into
bundles under its own signed subkey by `HostileDHT`, a SwarmDHT that refuses nothing itself, so whatever
stops an attack is always the honest receivers' and DHT holders' own checks. An attacker knows everything
public: the task, the zoo's tokenizer, even the zoo models' weights (`Victim.model`, for claims that match
them).
"""
from __future__ import annotations

import dataclasses
import math
import random
import time
from dataclasses import dataclass

from node.errors import SwarmUnreachable
from node.models.loading import encode_prompt
from node.swarm.dht import SwarmDHT, announcement_kind, record_key
from node.swarm.streams import NOT_SERVED
from node.tasks import Task, get_task, offline_task
from protocol import ANNOUNCE_SHARDS
from protocol import swarm_pb2 as pb
from protocol.bundle2 import unpack_groups
from protocol.codec import (
    DRAW_SLOTS,
    MAX_MADDRS,
    Announcement,
    BundleRef,
    LengthSummary,
    Limits,
    WireCard,
    WireCompletion,
    WireGroup,
    bundle_chunks,
    decode_announcement,
    drawn_index,
    encode_announcement,
    encode_group,
    encode_summary,
    pack_bundle,
)

HUB_TASKS = ("gsm8k", "math500")  # dataset-backed: an offline receiver must never try to load them
GYM_TASKS = ("gym:chain_sum", "gym:basic_arithmetic", "gym:leg_counting", "gym:fraction_simplification",
             "gym:gcd", "gym:lcm", "gym:prime_factorization", "gym:count_bits", "gym:decimal_arithmetic",
             "gym:number_sorting", "gym:word_sorting", "gym:letter_counting", "gym:caesar_cipher",
             "gym:spell_backward", "gym:propositional_logic", "gym:base_conversion", "gym:simple_equations",
             "gym:products", "gym:power_function", "gym:number_filtering")


@dataclass
class Victim:
    """What an attacker knows about its targets (all of it public)."""

    tokenizer: object
    card: WireCard  # claims the victims' own tokenizer and vocabulary
    eos_id: int
    task: Task
    max_new_tokens: int
    model: object = None  # the victims' zoo model, for claims that match it
    subkey: bytes = b""  # the attacker's own identity (its DHT subkey): groups built for it use items it drew

    def signed_by(self, subkey: bytes) -> Victim:
        """The same targets, for records an attacker under identity `subkey` publishes as its own."""
        return dataclasses.replace(self, subkey=subkey)

    def bind(self, label: int, created: float) -> tuple[int, float]:
        """(item index, stamp) of the group an attacker labels `label` (0..255 for distinct items within a
        second): an item it drew itself at second `created` (node/swarm/draws.py; anyone can draw for its own
        key), so that whatever stops the attack is the check under test, not the draw check. Without an
        identity, the label itself and `created` unchanged."""
        if not self.subkey:
            return label, created
        return drawn_index(self.subkey, int(created), label % DRAW_SLOTS), float(int(created))

    def prompt(self, index: int) -> list[int]:
        return encode_prompt(self.tokenizer, self.task.item("train", index))

    def ids(self, text: str) -> list[int]:
        return self.tokenizer(text).input_ids


def victim_for(model_name: str, task_name: str, max_new_tokens: int = 8, with_model: bool = False) -> Victim:
    from node.config import ModelConfig
    from node.models.loading import load_model
    from node.swarm.exchange import make_card

    loaded = load_model(ModelConfig(name=model_name))
    card = make_card(loaded.model, loaded.tokenizer, "transformers", 1.0, 1.0, lora=False)
    return Victim(loaded.tokenizer, card, loaded.tokenizer.eos_token_id, get_task(task_name), max_new_tokens,
                  loaded.model if with_model else None)


def group_record(v: Victim, index: int, completions: list[list[int]], logprobs: list[list[float]],
                 created: float, task: str | None = None, step: int = 0) -> bytes:
    """An encoded group for the victims' task item `index` (prompt ids exactly as the victims encode them):
    builders pass the index `Victim.bind` gives them."""
    comps = [WireCompletion(ids, lps, "stop" if ids and ids[-1] == v.eos_id else "length")
             for ids, lps in zip(completions, logprobs, strict=True)]
    ref_task = task or v.task.name
    version = v.task.version if task is None else get_version(ref_task)
    return encode_group(WireGroup(ref_task, version, "train", index, v.prompt(index), comps, v.card, step, created))


def get_version(task: str) -> str:
    """The version a receiver would expect for a task reference (what a careful attacker would claim)."""
    offline = offline_task(task)
    if offline is not None:
        return offline.version
    if task.startswith("gym:"):
        import importlib.metadata

        return importlib.metadata.version("reasoning-gym")
    return "hub"


def plain(v: Victim, index: int, g: int = 8, created: float = 0.0, **kw) -> bytes:
    """An unremarkable group: the right answer and wrong ones, each claimed at -0.5 per token."""
    index, created = v.bind(index, created)
    answer = v.task.item("train", index).answer
    texts = [answer if i % 2 else str(int(answer) + 1) for i in range(g)]
    completions = [v.ids(t) + [v.eos_id] for t in texts]
    return group_record(v, index, completions, [[-0.5] * len(c) for c in completions], created, **kw)


def uninformative(v: Victim, index: int, g: int = 8, created: float = 0.0) -> bytes:
    """A valid group that teaches nothing: every completion the same wrong answer (one reward under any
    verifier, so no advantage). The cheapest thing that passes every check, what a crowd-out attack sends."""
    index, created = v.bind(index, created)
    wrong = v.ids(str(int(v.task.item("train", index).answer) + 1)) + [v.eos_id]
    return group_record(v, index, [wrong] * g, [[-0.5] * len(wrong)] * g, created)


# ---- crashes and stalls ------------------------------------------------------------------------------------
def task_references(v: Victim, names, created: float) -> list[bytes]:
    """Groups whose task reference names a task the victims should never build from a record."""
    return [plain(v, 7 + i, created=created, task=name) for i, name in enumerate(names)]


def long_completions(v: Victim, created: float, tokens: int = 1000, index: int = 11) -> list[bytes]:
    """A 6 KB group whose two completions run to `tokens` tokens (the victims generate max_new_tokens)."""
    index, created = v.bind(index, created)
    digits = v.ids("1" * (tokens - 1)) + [v.eos_id]
    return [group_record(v, index, [digits, digits[:-1] + [v.eos_id]], [[-0.1] * tokens] * 2, created)]


def foreign_groups(v: Victim, created: float, index: int) -> list[bytes]:
    """Groups claiming another tokenizer that the victims can build (the zoo's BPE) whose completions decode to
    text far longer than the victims generate (16 and 120 characters from 8 and 60 BPE tokens), and the same
    under a tokenizer fingerprint that nothing builds."""

    from node.models.tokenizer import build_tokenizer, tokenizer_fingerprint

    tok = build_tokenizer("bpe")
    card = dataclasses.replace(v.card, tokenizer=tokenizer_fingerprint(tok), vocab_size=len(tok),
                               tokenizer_source="zoo:bpe")
    twelve = tok.convert_tokens_to_ids("12")
    comps = [WireCompletion([twelve] * n, [-0.5] * n, "length") for n in (8, 60)]
    records = []
    for i, claimed in enumerate((card, dataclasses.replace(card, tokenizer="0" * 16))):
        drawn, stamp = v.bind(index + i, created)
        item = v.task.item("train", drawn)
        records.append(encode_group(WireGroup(v.task.name, v.task.version, "train", drawn,
                                              encode_prompt(tok, item), comps, claimed, 0, stamp)))
    return records


# ---- poisoning ---------------------------------------------------------------------------------------------
CLAIMS = ("low", "floor", "matched")  # -30 per token; just inside the surprisal bound; the victims' own


def padding_poison(v: Victim, index: int, created: float, claims: str = "low", pad: int = 0,
                   g: int = 8) -> bytes:
    """Right answers behind '=' padding the verifier ignores (rewarded), plain wrong answers (not): the group
    teaches 'pad', and claimed log-probs set the weight it is taught with. pad=0: as much as fits the
    victims' length limit (the published attack used 30)."""
    index, created = v.bind(index, created)
    answer = v.task.item("train", index).answer
    pad = pad or max(v.max_new_tokens - len(answer) - 1, 1)
    padded = v.ids("=" * pad + answer) + [v.eos_id]
    wrong = v.ids(str(int(answer) + 1)) + [v.eos_id]
    completions = [padded if i % 2 == 0 else wrong for i in range(g)]
    return group_record(v, index, completions, claimed_logprobs(v, index, completions, claims), created)


def sample_completions(v: Victim, prompt: list[int], g: int) -> list[list[int]]:
    """g completions of `prompt` sampled from the victims' zoo model at temperature 1, each cut after its first
    end token (as an honest sampler stops)."""
    import torch

    with torch.no_grad():
        out = v.model.generate(torch.tensor([prompt]), do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                               num_return_sequences=g, max_new_tokens=v.max_new_tokens,
                               pad_token_id=v.eos_id, eos_token_id=v.eos_id)
    return [row[:row.index(v.eos_id) + 1] if v.eos_id in row else row for row in out[:, len(prompt):].tolist()]


def informative(v: Victim, index: int, prompt: list[int], completions: list[list[int]]) -> bool:
    """Whether our verifier gives the completions unequal rewards (a group an honest peer would publish)."""
    from node.generation.rollouts import Completion, Group, has_variance, score_group

    group = Group(v.task.item("train", index), prompt,
                  [Completion(c, [0.0] * len(c), "stop" if c[-1:] == [v.eos_id] else "length",
                              v.tokenizer.decode(c, skip_special_tokens=True)) for c in completions])
    score_group(v.task, group)
    return has_variance(group.rewards)


def sampled_groups(v: Victim, indices: list[int], created: float, g: int = 8, seed: int = 0) -> list[bytes]:
    """What an honest peer running the victims' zoo model untrained would publish: g completions per prompt
    sampled at temperature 1, with the sampler's own log-probs (the informative groups only). A hostile peer
    serves these to become established before it switches (issue 23: behave, then poison)."""
    import torch

    records = []
    torch.manual_seed(seed)
    for label in indices:
        index, stamp = v.bind(label, created)
        prompt = v.prompt(index)
        completions = sample_completions(v, prompt, g)
        if informative(v, index, prompt, completions):
            records.append(group_record(v, index, completions, model_logprobs(v, prompt, completions), stamp))
    return records


PADDING = ("eos", "cap")  # tokens after the end token (and the end token again); stopped completions filled to the cap


def padded_groups(v: Victim, indices: list[int], created: float, how: str = "eos", g: int = 8,
                  seed: int = 0) -> list[bytes]:
    """Issue 54, 8 (seen live in another open RL network): sampled groups padded after sampling, claiming the
    log-probs the victims' model gives the padded completions, raised to a uniform sampler's where lower (so that
    the codec's surprisal bound lets them through: w <= 1 on the padding at the receivers). "eos": every stopped
    completion goes on after its end token with '=' up to the cap and ends with the end token again (a sampler
    stops at the first: the boundary can see it). "cap": every wrong stopped completion loses its end token and is
    filled with '=' up to the cap, cut there as "length" (a model that rambles on: the boundary cannot tell; a
    right one is left as it is: an unfinished completion scores 0 on our tasks, the group would teach nothing)."""
    import torch

    from node.generation.rollouts import Completion, score_completion

    records, filler = [], v.ids("=")[-1]
    torch.manual_seed(seed)
    for label in indices:
        index, stamp = v.bind(label, created)
        prompt, item = v.prompt(index), v.task.item("train", index)
        completions = sample_completions(v, prompt, g)
        if not any(c[-1:] == [v.eos_id] for c in completions):
            continue
        padded = []
        for c in completions:
            right = score_completion(v.task, item, Completion(c, [0.0] * len(c), "stop" if c[-1:] == [v.eos_id]
                                                              else "length", v.tokenizer.decode(
                                                                  c, skip_special_tokens=True))) >= 1.0
            if c[-1:] != [v.eos_id] or (how == "cap" and right):
                padded.append(c)
            elif how == "eos":
                padded.append(c + [filler] * max(v.max_new_tokens - len(c) - 1, 1) + [v.eos_id])
            else:
                padded.append(c[:-1] + [filler] * (v.max_new_tokens - len(c) + 1))
        if informative(v, index, prompt, padded):  # claims: the model's own, at most uniform's surprisal a token
            floor = -math.log(v.card.vocab_size)  #    (the model finds '=' after an answer far less likely: the
            claims = [[max(x, floor) for x in row] for row in model_logprobs(v, prompt, padded)]  # codec's bound)
            records.append(group_record(v, index, padded, claims, stamp))
    return records


def cherry_picked(v: Victim, indices: list[int], created: float, g: int = 8, pool: int = 32,
                  seed: int = 0) -> list[bytes]:
    """Issue 54, 8 (seen live in another open RL network): `pool` completions sampled per prompt from the victims'
    zoo model at temperature 1, with their true log-probs, and g of them published: every right one it found up
    to g - 1, and one wrong (a group that looks like a model far better than it is, and whose advantages are
    skewed: the one wrong row carries the whole negative mass). Valid by every check a receiver can make."""
    import torch

    from node.generation.rollouts import Completion, score_completion

    records = []
    torch.manual_seed(seed)
    for label in indices:
        index, stamp = v.bind(label, created)
        prompt, item = v.prompt(index), v.task.item("train", index)
        right, wrong = [], []
        for ids in sample_completions(v, prompt, pool):
            comp = Completion(ids, [0.0] * len(ids), "stop" if ids[-1:] == [v.eos_id] else "length",
                              v.tokenizer.decode(ids, skip_special_tokens=True))
            (right if score_completion(v.task, item, comp) >= 1.0 else wrong).append(ids)
        if not right or not wrong:
            continue
        chosen = right[:g - 1] + wrong[:1]
        if len(chosen) < 2 or len({len(c) for c in chosen if c[-1:] != [v.eos_id]}) > 1:
            continue  # (an honest group's cuts are of one length: keep the pick unpadded)
        records.append(group_record(v, index, chosen, model_logprobs(v, prompt, chosen), stamp))
    return records


WORK = ("random", "other")  # made-up work: random characters; another problem's worked steps (plausible)


def made_up_work(v: Victim, index: int, created: float, work: str = "random", g: int = 8,
                 seed: int = 0) -> bytes:
    """For tasks whose completions show their work (digits): the right answer after work that does not lead to
    it (rewarded where the verifier checks only the answer; `digits` now checks the work too), and the right
    work with a wrong answer (not),
    claimed at log-prob -0.1 a token (likelier to the sender than to any honest model, as a floor-seeking
    sender claims). The group teaches 'write anything, then the answer'; what it costs a victim depends on the
    weight its loss gives the rewarded rows (verified-imitation's floor lifts them unless they are implausible)."""
    from node.tasks.digits import worked

    index, created = v.bind(index, created)
    item = v.task.item("train", index)
    a, op, b = v.task.problem("train", index)
    rng = random.Random(seed * 1_000_003 + index)
    right_work = worked(a, op, b)[0].rsplit(";", 1)[0]
    if work == "random":
        made_up = "".join(rng.choice("0123456789+-=,") for _ in range(len(right_work)))
    else:  # another problem of the same size, worked correctly: every step looks right
        top = 10 ** len(str(a))
        a2 = rng.randint(top // 10, top - 1)
        b2 = rng.randint(1, a2)
        made_up = worked(a2, op, b2)[0].rsplit(";", 1)[0]
    rewarded = v.ids(f"{made_up};{item.answer}") + [v.eos_id]
    wrong = v.ids(f"{right_work};{int(item.answer) + 1}") + [v.eos_id]
    completions = [rewarded if i % 2 == 0 else wrong for i in range(g)]
    return group_record(v, index, completions, [[-0.1] * len(c) for c in completions], created)


def stealth_poison(v: Victim, index: int, created: float, g: int = 8, wrong_rows: int = 2) -> bytes:
    """Issue 54, 3: `wrong_rows` wrong answers claimed ln 2 + 0.05 a token below the victims' model's own
    log-probs (every token's weight just above the cap C = 2), the other rows right answers claimed near-certain
    (-0.001 a token): rows our model finds less likely than claimed, each of which lowered the one bet of the
    e-detector of old by log 2, so that the step's evidence stayed negative (-0.94 a group was measured)."""
    index, created = v.bind(index, created)
    answer = v.task.item("train", index).answer
    wrong = v.ids(str(int(answer) + 1)) + [v.eos_id]
    right = v.ids(answer) + [v.eos_id]
    completions = [wrong if i < wrong_rows else right for i in range(g)]
    own = model_logprobs(v, v.prompt(index), completions)
    claims = [[x - math.log(2.0) - 0.05 for x in lp] if i < wrong_rows else [-0.001] * len(lp)
              for i, lp in enumerate(own)]
    return group_record(v, index, completions, claims, created)


def claimed_logprobs(v: Victim, index: int, completions: list[list[int]], claims: str) -> list[list[float]]:
    if claims == "low":
        return [[-30.0] * len(c) for c in completions]
    if claims == "floor":  # the most surprisal the codec's honest-sampler bound lets through, spread evenly
        per_token = math.log(v.card.vocab_size) + 1.0
        return [[-min(per_token, (len(c) * math.log(v.card.vocab_size) + 19.0) / len(c))] * len(c)
                for c in completions]
    return model_logprobs(v, v.prompt(index), completions)


def model_logprobs(v: Victim, prompt: list[int], completions: list[list[int]]) -> list[list[float]]:
    """The victims' model's own log-probs of each completion: w = 1 and D = 0 at the receivers."""
    import torch

    from node.generation.rollouts import Completion, Group
    from node.rl.batching import build_batch
    from node.rl.learner import sequence_logprobs

    group = Group(v.task.item("train", 0), prompt, [Completion(c, [0.0] * len(c), "stop") for c in completions])
    batch = build_batch([group], [], v.tokenizer.pad_token_id, lambda rewards, _: [0.0] * len(rewards), False)
    with torch.no_grad():
        logp = sequence_logprobs(v.model, batch, temperature=1.0)
    return [logp[i, : len(c)].tolist() for i, c in enumerate(completions)]


# ---- replays and forged summaries --------------------------------------------------------------------------
def restamped(record: bytes, step: int, created: float) -> bytes:
    """The same group with a new step and publish time (what a replaying peer sends)."""
    msg = pb.Group.FromString(record)
    msg.step, msg.created = step, created
    return msg.SerializeToString()


def summary_flood(step: int, n: int = 256, group_size: int = 16) -> list[bytes]:
    """n summaries saying 'groups of 16 never straggle' (median = max), stamped with `step`."""
    return [encode_summary(LengthSummary(group_size, 8, 8.0, 8.0, 8 * group_size, 0.1, "qwen2", step))
            for _ in range(n)]


# ---- the hostile peer --------------------------------------------------------------------------------------
class HostileDHT(SwarmDHT):
    """A DHT node that validates nothing itself (it still signs its own subkey): a stand-in for a raw hivemind
    client speaking our wire format. It announces and serves whatever bundles it is given, as an honest peer
    would, under a card that claims the victims' tokenizer."""

    max_value_bytes = 4 << 20

    def __init__(self, settings, card: WireCard, stop=None):
        self.card = card
        super().__init__(settings, stop=stop)

    def _validators(self) -> list:
        return [self.validator]

    def publish_records(self, kind: str, records: list[bytes], ttl: float = 60.0, push: bool = True) -> bool:
        """Serves `records` as this kind's bundle (the other kind keeps its latest, or an empty bundle) and
        announces both; with `push`, makes itself known as a newcomer does (make_known). True when the
        announcement was stored."""
        self.serve(kind, pack_bundle(records, 4 << 20)[0])
        for other in ("groups", "summaries"):
            if self._served.latest(other) is None:
                self.serve(other, pack_bundle([], 1 << 10)[0])
        refs = {}
        for name in ("groups", "summaries"):
            digest, bundle = self._served.latest(name)
            refs[name] = BundleRef(digest, len(bundle), 1)
        announcement = Announcement(self.peer_id, tuple(self.visible_maddrs()[:MAX_MADDRS]), 0, self.now(),
                                    self.card, **refs)
        value = encode_announcement(announcement)
        stored = bool(self.announce_async(value, ttl).result(15))
        if push:
            self.make_known(value)
        return stored

    def make_known(self, value: bytes, fanout: int = 8) -> int:
        """What a newcomer does to be found without waiting for others' directory reads (node/swarm/gossip.py):
        serves its announcement `value` signed (kind "ann") and a view of it alone, then pushes to up to
        `fanout` peers it reads in the directory. Returns how many it pushed to."""
        from protocol.view import SignedAnnouncement, pack_view

        digest = self.serve("ann", value)
        self.serve("view", pack_view([SignedAnnouncement(self.own_subkey, value, self.signature("ann", digest))]))
        found = self.fetch_shards_async(list(range(ANNOUNCE_SHARDS))).result(30)
        peers = [decode_announcement(v) for v, _ in found.values()][:fanout]
        for peer in peers:
            self.hello_async(peer.peer_id, peer.maddrs)
        return len(peers)

    def honest_records(self) -> list[bytes]:
        """Every record the other peers serve now (read from all their announcements, pulled from each)."""
        found = self.fetch_shards_async(list(range(ANNOUNCE_SHARDS))).result(30)
        records = []
        for value, _ in found.values():
            announcement = decode_announcement(value)
            try:
                bundle = self.pull_async(announcement.peer_id, "groups", b"", 4 << 20, timeout=15,
                                         maddrs=announcement.maddrs).result(20)
            except Exception:  # noqa: BLE001 (a peer gone since it announced: nothing to replay from it)
                continue
            records += unpack_groups(bundle, Limits(max_bytes=4 << 20))
        return records

    def raw_store(self, kind: str, value: bytes, expiration: float, subkey) -> bool:
        """Stores any (subkey, value, expiration) under our swarm's key on the other nodes (not in our own
        storage), signed only where the subkey carries our owner marker; True when any node took it."""
        return bool(self._call(self._node.store(record_key(self.settings.name, kind), value, expiration,
                                                subkey=subkey, exclude_self=True), timeout=15))


class SybilSwarm:
    """One operator, many identities: `n` HostileDHT nodes in this process, each with its own RSA key (DHT
    subkey), peer id and p2p daemon, started concurrently; each announces and serves its own signed bundles."""

    def __init__(self, settings, card: WireCard, n: int):
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(8) as pool:
            self.nodes = list(pool.map(lambda _: self.identity(settings, card), range(n)))

    @staticmethod
    def identity(settings, card: WireCard, attempts: int = 3) -> HostileDHT:
        """One identity, started as a persistent operator would: a join whose bootstrap ping was lost (dozens
        of daemons starting at once on a loaded machine) is tried again, `attempts` times in all."""
        for attempt in range(1, attempts + 1):
            try:
                return HostileDHT(settings, card=card)
            except SwarmUnreachable:
                if attempt == attempts:
                    raise
                time.sleep(2.0 * attempt)
        raise AssertionError("unreachable")

    @property
    def subkeys(self) -> set[bytes]:
        return {node.own_subkey for node in self.nodes}

    def publish(self, records_of) -> int:
        """Each identity i serves and announces `records_of(i)`; the number of announcements stored."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(8) as pool:
            return sum(pool.map(lambda i: self.nodes[i].publish_records("groups", records_of(i), push=False),
                                range(len(self.nodes))))

    def shutdown(self) -> None:
        for node in self.nodes:
            node.shutdown()


def unsigned_stores(dht: HostileDHT, n: int = 8) -> list[bool]:
    """The published crash, aimed at our own announcement shard: plain `str` and `bytes` subkeys (no owner
    marker, so no signature needed) with one shared expiration, then our own marker with an expiration 1e9 s
    away. Returns what each store reported."""
    kind, expiration = announcement_kind(dht.shard), dht.now() + 60
    results = []
    for i in range(n):
        subkey = f"peer-{i}" if i % 2 else f"peer-{i}".encode()
        results.append(dht.raw_store(kind, b"x" * 100, expiration, subkey=subkey))
    results.append(dht.raw_store(kind, b"y" * 100, dht.now() + 1e9, subkey=dht.own_subkey))
    return results


def random_indices(seed: int, n: int) -> list[int]:
    """n distinct labels for `Victim.bind` (item indices of their own without an identity)."""
    return random.Random(seed).sample(range(DRAW_SLOTS), n)


class EmptyChunkDHT(HostileDHT):
    """Serves the first half of what it announces as a first chunk, signed as the owner would, then empty
    chunks until the reader gives up (issue 23, 5: 4 identities sent 6.07 M of them a minute and slowed every
    honest step)."""

    async def _serve_bundle(self, request, requester: str = ""):
        import asyncio

        found = self._served.get(request.kind, bytes(request.digest))
        if found is None:
            yield NOT_SERVED
            return
        bundle, signature = found  # chunked as the sender likes: the first chunk never completes the bundle
        first = bundle_chunks(bundle, signature, chunk=max(1, len(bundle) // 2))[0]
        yield first
        empty = pb.BundleChunk(version=first.version, total=first.total, digest=first.digest)
        while True:
            yield empty
            await asyncio.sleep(0)
