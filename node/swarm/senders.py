"""The sender ledger: everything a peer believes about each sender, and the questions the exchange asks of it.

What it holds of a sender: its newest announcement, whether it is established, its back-off, its score, the
evidence (e-detector) and harm statistics, and whether its peer id is distrusted or demoted. What the exchange
asks: whom to pull this step and in what order (`choose`), whether a sender is a newcomer (how much of it a step
may use), whom to vouch for in our view (`vouched`). What the learner reports, once a step through the
`SenderJudge` seam (node/rl/transfer/guard.py): each sender's log-evidence when the batch is planned (the ledger
answers which senders' rows give no gradient) and, with the harm detector on, each sender's alignment after
the update.

Known senders come and go with their announcements (bounded memory, expiry). Each step the exchange pulls from
a few of them: drawn at random, weighted towards senders whose groups passed validation and were informative
(non-zero reward variance under our verifier), with a floor that keeps exploring the others; a sender whose
pull fails or whose records are all refused is backed off exponentially (1, 2, 4, ... steps, at most
2^MAX_BACKOFF), so a persistent offender is, in effect, ignored; one whose groups teach nothing (one reward
per group) sinks towards the exploration floor.

Sybils: identities cost nothing, so a sender is a newcomer until ESTABLISHED_AFTER of its pulls brought
informative groups that passed validation. Established senders are pulled first (`explore` slots kept for
newcomers while there are any), so fifty fresh identities cannot crowd out a sender that has earned its place;
and the exchange caps what all newcomers together contribute to a step (swarm.explore_pulls x the per-sender
cap), however many of them there are.
Announcements naming the same peer id count as one sender (a pull goes to the peer id, and its bundle must
carry the signature of the announcing identity, so only one of them can be its owner).

Establishment can be lost. A sender whose records are all refused (they broke the protocol) is a newcomer
again. Both statistics are CUSUMs of per-step log-bets, S_t = max(S_{t-1}, 0) + (this step's), which restart at
0 whenever the evidence falls below 1, so a long honest past buys a sender nothing. A sender whose evidence
(its claimed log-probs tested against our own model, node/rl/transfer/guard.py) reaches trust.sender_bound is
distrusted for good, with its peer id: never pulled again, whatever identity names that peer id (an honest
sender gets there once in e^20 steps). A sender whose harm statistic (node/rl/alignment.py: its groups' gradient
keeps pointing against our own groups') reaches trust.harm_bound is demoted: its peer id is not pulled from for
trust.demote_steps steps, then it is tried afresh as a newcomer (what hurt us then may not later, and a peer
neutral to us loses nothing that helped).
"""
from __future__ import annotations

import logging
import math
import random
from collections import OrderedDict
from dataclasses import dataclass, field

from node.config import TrustConfig
from node.rl.alignment import harm_log_bet
from protocol.codec import Announcement

log = logging.getLogger(__name__)

EXPLORE = 0.1  # weight floor of every eligible sender (exploration)
MAX_BACKOFF = 10  # at most 2^10 steps between tries of a failing sender
ESTABLISHED_AFTER = 2  # pulls with informative, valid groups before a sender is no longer a newcomer


@dataclass
class SenderState:
    announcement: Announcement
    expires: float  # of its announcement record
    failures: int = 0  # consecutive
    retry_step: int = 0  # not pulled before this step
    score: float = 0.5  # moving average of the informative share of its accepted groups
    informative_pulls: int = 0  # pulls whose accepted groups included informative ones
    seen: float = 0.0  # our clock when we first read its newest announcement (what `swarm status` orders by)
    evidence: float = 0.0  # e-detector statistic against its claims (node/rl/transfer/guard.py), fed by the learner:
    #                        combined_evidence of `bets`
    bets: tuple[float, ...] = ()  # the CUSUM of each bet size (guard.sender_bets); () before its first rows
    harm: float = 0.0  # harm statistic of its groups against ours (node/rl/alignment.py), fed by the learner
    unreachable: bool = False  # a pull failed since its newest announcement (it may be dead: not counted present)
    failed_step: int = -1  # the step of its last failure (its groups and summaries pulls fail together: once)
    tokens: int = 0  # its tokens we trained on, in all (fed by the learner: judge_weights)
    capped: int = 0  # of which the transfer policy's weight cap cut (claims that push weights up are counted)
    mass: float = 0.0  # their summed weight: what its groups weighed in our loss

    @property
    def established(self) -> bool:
        return self.informative_pulls >= ESTABLISHED_AFTER

    @property
    def capped_share(self) -> float:
        """The share of its tokens we trained on whose weight the cap cut, in all (0: none yet)."""
        return self.capped / self.tokens if self.tokens else 0.0

    @property
    def mean_weight(self) -> float:
        """Their mean weight in our loss (0: none yet)."""
        return self.mass / self.tokens if self.tokens else 0.0


def cusum(statistic: float, step_log_bet: float) -> float:
    """A CUSUM after one more step: max(statistic, 0) + this step's log-bet."""
    return max(statistic, 0.0) + step_log_bet


def combined_evidence(bets: tuple[float, ...]) -> float:
    """One statistic from the CUSUMs of several bet sizes: the largest, less the log of their number (a union
    bound: an honest sender reaches a bound b as rarely as with one bet at b)."""
    return max(bets) - math.log(len(bets)) if bets else 0.0


@dataclass
class StepVerdicts:
    """What the ledger concluded in one step (the step's metrics)."""

    distrusted: int = 0  # senders distrusted this step
    evidence: float = 0.0  # the largest evidence statistic among the step's senders (0: none)
    demoted: int = 0  # senders demoted this step
    harm: float = 0.0  # the largest harm statistic among the step's senders (0: none)
    alignments: dict[str, float] = field(default_factory=dict)  # peer id -> this step's cosine with our groups
    weights: dict[str, tuple[int, int, float]] = field(default_factory=dict)  # peer id -> this step's (tokens in the
    #                                             loss, of which at the weight cap, summed weight): judge_weights


def backoff_steps(failures: int) -> int:
    """Steps a sender sits out after `failures` consecutive failures."""
    return 2 ** min(failures - 1, MAX_BACKOFF) if failures > 0 else 0


class SenderLedger:
    def __init__(self, capacity: int, rng: random.Random, trust: TrustConfig | None = None):
        self.capacity, self.rng = capacity, rng
        self.trust = trust or TrustConfig()
        self.known: OrderedDict[bytes, SenderState] = OrderedDict()
        self.distrusted: OrderedDict[str, None] = OrderedDict()  # peer ids whose evidence reached the bound
        self.demoted: dict[str, int] = {}  # peer id -> the step from which it may be pulled again
        self.step = 0  # the step under way (the exchange's)
        self.verdicts = StepVerdicts()  # this step's

    def begin_step(self, step: int) -> None:
        self.step, self.verdicts = step, StepVerdicts()

    # ---- what the learner reports (node/rl/transfer/guard.py SenderJudge) ------------------------------------
    @property
    def watches_alignment(self) -> bool:
        return self.trust.harm_bound > 0

    def judge_evidence(self, evidence: dict[bytes, tuple[float, ...]]) -> set[bytes]:
        """Adds each sender's log-evidence of this step, one figure a bet size, to its CUSUMs; returns the
        senders whose rows give no gradient: their combined statistic (combined_evidence) reached
        trust.sender_bound (now: their peer id is distrusted from now on and logged), or their peer id was
        distrusted before."""
        cut = set()
        for i, (sender, step_log_bets) in enumerate(evidence.items()):
            state = self.known.get(sender)
            before = state.bets if state is not None and state.bets else (0.0,) * len(step_log_bets)
            bets = tuple(cusum(b, x) for b, x in zip(before, step_log_bets, strict=True))
            value = combined_evidence(bets)
            self.verdicts.evidence = value if i == 0 else max(self.verdicts.evidence, value)
            if state is None:  # forgotten since its groups came (its announcement expired): this step's alone
                if self.trust.sender_bound and value >= self.trust.sender_bound:
                    cut.add(sender)
                continue
            state.bets = bets
            if self.observe(sender, value, self.trust.sender_bound):
                self.verdicts.distrusted += 1
                log.warning("distrusting peer %s for good: the log-probs it claims make our importance weights "
                            "larger than any honest sampler's (evidence %.1f >= %g)", state.announcement.peer_id,
                            value, self.trust.sender_bound)
            if state.announcement.peer_id in self.distrusted:
                cut.add(sender)
        return cut

    def judge_weights(self, weights: dict[bytes, tuple[int, int, float]]) -> None:
        """Counts each sender's tokens in this step's loss, those at the policy's weight cap, and their weight,
        for the step's metrics and in its state (a sender whose claims push our weights to the cap is counted
        for it: SenderState.capped_share)."""
        for sender, (tokens, capped, mass) in weights.items():
            state = self.known.get(sender)
            if state is None or tokens == 0:
                continue
            state.tokens, state.capped, state.mass = state.tokens + tokens, state.capped + capped, state.mass + mass
            self.verdicts.weights[state.announcement.peer_id] = (tokens, capped, round(mass, 4))

    def judge_alignment(self, cosines: dict[bytes, float]) -> None:
        """Adds each sender's harm bet of this step (its cosine with our own groups' gradient) to its statistic; a
        sender whose statistic reaches trust.harm_bound is demoted (logged)."""
        for sender, cos in cosines.items():
            state = self.known.get(sender)
            if state is None:
                continue
            value = cusum(state.harm, harm_log_bet(cos, self.trust.harm_bet))
            self.verdicts.harm = value if not self.verdicts.alignments else max(self.verdicts.harm, value)
            self.verdicts.alignments[state.announcement.peer_id] = round(cos, 4)
            if self.observe_harm(sender, value, self.trust.harm_bound, self.step, self.trust.demote_steps):
                self.verdicts.demoted += 1
                log.info("demoting peer %s for %d steps: its groups keep pulling our model against our own groups "
                         "(harm %.1f >= %g; alignment this step %+.2f)", state.announcement.peer_id,
                         self.trust.demote_steps, value, self.trust.harm_bound, cos)

    def shunned(self, peer_id: str, step: int | None = None) -> bool:
        """Whether a peer id is distrusted, or demoted at `step` (None: the step under way): not pulled, not
        vouched for, and out of our view."""
        return peer_id in self.distrusted or self.demoted.get(peer_id, 0) > (self.step if step is None else step)

    def vouched(self, now: float) -> list[bytes]:
        """Live senders whose groups proved valid and informative here, none distrusted or demoted (the ones our
        view vouches for)."""
        return [s for s in self.present(now) if self.known[s].established
                and not self.shunned(self.known[s].announcement.peer_id)]

    # ---- who to pull -----------------------------------------------------------------------------------------

    def learn(self, subkey: bytes, announcement: Announcement, expires: float, seen: float = 0.0) -> None:
        """Remembers a sender's newest announcement (its health is kept across announcements), read at our
        time `seen`."""
        state = self.known.get(subkey)
        if state is None:
            self.known[subkey] = SenderState(announcement, expires, seen=seen)
            while len(self.known) > self.capacity:
                self.known.popitem(last=False)
        elif announcement.created >= state.announcement.created:
            if announcement.created > state.announcement.created and state.unreachable:
                state.unreachable = False  # it announced again after its pulls failed: alive (a restart),
                state.failures = state.retry_step = 0  # so its back-off ends (refused records keep theirs)
            state.announcement, state.expires, state.seen = announcement, expires, seen
        self.known.move_to_end(subkey)

    def forget(self, withdrawn) -> None:
        """Forgets senders that withdrew (a tombstone read in their place). A sender missing from a read is
        kept until its announcement expires: a read can come back empty because of someone else's record or
        a slow holder (issue 23's shard blackout), which says nothing about the sender."""
        for subkey in withdrawn:
            self.known.pop(subkey, None)

    def live(self, now: float) -> list[bytes]:
        """Senders whose announcement has not expired (expired ones are forgotten)."""
        for subkey in [k for k, s in self.known.items() if s.expires <= now]:
            del self.known[subkey]
        return list(self.known)

    def helping(self, now: float) -> int:
        """How many live senders brought informative groups at least once."""
        return sum(self.known[k].informative_pulls > 0 for k in self.live(now))

    def present(self, now: float) -> list[bytes]:
        """Live senders that look alive: none of our pulls failed since their newest announcement. A peer that
        died leaves its announcement in the directory until it expires; the first pull that fails after that
        stops it being counted (what the progress line's `peers` and `alone:` say)."""
        return [k for k in self.live(now) if not self.known[k].unreachable]

    def choose(self, now: float, step: int, k: int, busy: set[bytes], explore: int) -> list[bytes]:
        """Up to k live senders not busy (a pull in flight, also under another identity's name for the same
        peer id) and not backed off: established senders first, leaving `explore` of the k to newcomers while
        there are any, then newcomers in whatever is left; each drawn without replacement with weight EXPLORE +
        score."""
        busy_peers = {self.known[s].announcement.peer_id for s in busy if s in self.known}
        pool = [s for s in self.live(now) if s not in busy and self.known[s].retry_step <= step
                and self.known[s].announcement.peer_id not in busy_peers
                and not self.shunned(self.known[s].announcement.peer_id, step)]
        newcomers = [s for s in pool if not self.known[s].established]
        chosen = self._draw([s for s in pool if self.known[s].established], k - min(explore, len(newcomers)), set())
        taken = {self.known[s].announcement.peer_id for s in chosen}
        return chosen + self._draw(newcomers, k - len(chosen), taken)

    def _draw(self, pool: list[bytes], k: int, peer_ids: set[str]) -> list[bytes]:
        """Up to k of pool, weighted, one per peer id (not in peer_ids)."""
        pool = [s for s in pool if self.known[s].announcement.peer_id not in peer_ids]
        chosen = []
        while pool and len(chosen) < k:
            weights = [EXPLORE + self.known[s].score for s in pool]
            pick = pool.pop(self.rng.choices(range(len(pool)), weights)[0])
            chosen.append(pick)
            pool = [s for s in pool if self.known[s].announcement.peer_id != self.known[pick].announcement.peer_id]
        return chosen

    def is_newcomer(self, subkey: bytes) -> bool:
        state = self.known.get(subkey)
        return state is None or not state.established

    def failed(self, subkey: bytes, step: int, refused: bool = False) -> None:
        """A pull that failed, backed off; refused: it brought only records we refused, which also makes the
        sender a newcomer again (its place was earned by valid groups)."""
        state = self.known.get(subkey)
        if state is None:
            return
        if state.failed_step != step:  # at most one failure counted a step
            state.failed_step = step
            state.failures += 1
            state.retry_step = step + backoff_steps(state.failures)
        if refused:
            state.informative_pulls = 0
        else:  # it did not answer
            state.unreachable = True

    def observe(self, subkey: bytes, evidence: float, bound: float) -> bool:
        """Records a sender's evidence after a step; True when it has just reached `bound` (> 0) and the
        sender's peer id is distrusted from now on."""
        state = self.known.get(subkey)
        if state is None:
            return False
        state.evidence = evidence
        peer_id = state.announcement.peer_id
        if not bound or evidence < bound or peer_id in self.distrusted:
            return False
        self.distrusted[peer_id] = None
        while len(self.distrusted) > 4 * self.capacity:
            self.distrusted.popitem(last=False)
        state.informative_pulls, state.score = 0, 0.0
        return True

    def observe_harm(self, subkey: bytes, harm: float, bound: float, step: int, rest: int) -> bool:
        """Records a sender's harm statistic after step `step`; True when it has just reached `bound` (> 0): its
        peer id is demoted until step + 1 + rest, and then starts afresh (harm 0, a newcomer)."""
        state = self.known.get(subkey)
        if state is None:
            return False
        peer_id = state.announcement.peer_id
        if not bound or harm < bound or self.demoted.get(peer_id, 0) > step:
            state.harm = harm
            return False
        for peer in [p for p, until in self.demoted.items() if until <= step]:
            del self.demoted[peer]  # (bounded: only peers demoted in the last `rest` steps are kept)
        self.demoted[peer_id] = step + 1 + rest
        state.harm, state.informative_pulls = 0.0, 0
        return True

    def succeeded(self, subkey: bytes, informative_share: float) -> None:
        state = self.known.get(subkey)
        if state is not None:
            state.failures, state.retry_step, state.unreachable = 0, 0, False
            state.score = 0.7 * state.score + 0.3 * informative_share
            state.informative_pulls += informative_share > 0
