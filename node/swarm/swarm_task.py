"""The swarm's task: a swarm trains one task, and a joining peer learns it from the swarm.

Every announcement carries the task its peer trains on and the answer cap it generates with (protocol/codec.py
`SwarmTask`). A peer joining without a task of its own (`join`'s default, task name SWARM) reads announcements
(`read_swarm_task`: level-0 shards in a random order, a few at a time, until it has ENOUGH fresh ones that name a
task, or has read them all) and takes the task most of them announce (`majority`: counted by identity, a tie to
the newest). A peer whose own task or answer cap differs is told in one line before it loads its model
(`settle`); it stops there unless told to keep its own (its groups and the swarm's would then be refused both
ways, as "other-task", so it would learn alone). Announcements are signed by their identities, but identities
cost nothing: a peer that must not be talked into a task names it (--task), and is then only warned.
"""
from __future__ import annotations

import collections
import random
from collections.abc import Iterable
from dataclasses import dataclass

from protocol import ANNOUNCE_SHARDS
from protocol.codec import Announcement, RecordError, SwarmTask, decode_announcement

SWARM = "swarm"  # task.name that stands for "the swarm's task" (join's default)
READ_SHARDS = 8  # level-0 shards a read asks for at once
ENOUGH = 16  # fresh announcements naming a task that settle the majority (more are not read for it)
READ_TIMEOUT = 30.0  # seconds one read may take


@dataclass(frozen=True)
class Found:
    """What the announcements read say of the swarm's task."""

    task: SwarmTask | None  # the one most identities announce (None: no announcement names one)
    agreeing: int  # identities announcing it
    peers: int  # identities whose announcements were read (naming a task or not)

    def describe(self) -> str:
        if self.task is None:
            return f"no task announced by the {self.peers} peers read" if self.peers else "no peer announces yet"
        return f"{self.task.describe()}, announced by {self.agreeing} of {self.peers} peers read"


def majority(announcements: Iterable[Announcement]) -> Found:
    """The task most announcements name (one per identity: the caller's), a tie going to the newest one."""
    counts: collections.Counter = collections.Counter()
    newest: dict[SwarmTask, float] = {}
    peers = 0
    for a in announcements:
        peers += 1
        if a.task is not None:
            counts[a.task] += 1
            newest[a.task] = max(newest.get(a.task, a.created), a.created)
    if not counts:
        return Found(None, 0, peers)
    task = max(counts, key=lambda t: (counts[t], newest[t]))
    return Found(task, counts[task], peers)


def read_swarm_task(transport, max_age: float, rng: random.Random | None = None) -> Found:
    """What the swarm's fresh announcements say its task is (transport: node/swarm SwarmTransport), reading
    level-0 shards READ_SHARDS at a time in a random order until ENOUGH name a task or all are read. A read that
    fails or times out ends the search with what was found."""
    shards = list(range(ANNOUNCE_SHARDS))
    (rng or random.Random()).shuffle(shards)
    read: dict[bytes, Announcement] = {}
    for start in range(0, len(shards), READ_SHARDS):
        try:
            records = transport.fetch_shards_async(shards[start:start + READ_SHARDS]).result(READ_TIMEOUT)
        except Exception:  # noqa: BLE001 (whatever the network raises: we settle with what we have)
            break
        now = transport.now()
        for subkey, (value, _) in records.items():
            try:
                a = decode_announcement(value)
            except RecordError:
                continue
            if abs(now - a.created) <= max_age and transport.owns(subkey, a.peer_id):
                read[subkey] = a
        if sum(a.task is not None for a in read.values()) >= ENOUGH:
            break
    return majority(read.values())


@dataclass(frozen=True)
class Settled:
    task: str  # the task this peer trains on
    answer_cap: int  # generation.max_new_tokens to use (0: the task's own)
    line: str  # what the peer is told, one line
    mismatch: bool  # its own task or cap differs from the swarm's


def settle(asked: str, asked_cap: int, found: Found, default: str) -> Settled:
    """The task and answer cap a joining peer trains with. asked: its task name (SWARM: the swarm's); asked_cap:
    its generation.max_new_tokens (0: the task's own); default: the task a new swarm starts on."""
    swarm = found.task
    if asked == SWARM:
        if swarm is None:
            return Settled(default, asked_cap, f"task {default}: {found.describe()}, so this peer sets the swarm's "
                                               f"(--task chooses another)", False)
        if asked_cap and asked_cap != swarm.answer_cap:
            return Settled(swarm.name, asked_cap, f"this swarm trains {found.describe()}; your answer cap "
                                                  f"(generation.max_new_tokens) is {asked_cap}", True)
        return Settled(swarm.name, swarm.answer_cap, f"task {swarm.name}, the swarm's ({found.describe()})", False)
    if swarm is None or (swarm.name == asked and (not asked_cap or asked_cap == swarm.answer_cap)):
        line = f"task {asked}" + (f" (the swarm's: {found.describe()})" if swarm is not None else
                                  f" ({found.describe()})")
        return Settled(asked, asked_cap or (swarm.answer_cap if swarm is not None else 0), line, False)
    if swarm.name != asked:
        return Settled(asked, asked_cap, f"this swarm trains {found.describe()}, not --task {asked}", True)
    return Settled(asked, asked_cap, f"this swarm trains {found.describe()}; your answer cap "
                                     f"(generation.max_new_tokens) is {asked_cap}", True)
