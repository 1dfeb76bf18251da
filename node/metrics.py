"""What one training step reports, as typed records, and the JSON-lines file they are written to.

A step's result holds three parts, each filled by the layer that knows it: the learner's loss statistics
(node/rl), the exchange's (node/swarm: what was published, received, rejected), and the group policy's
(node/sagc). One line of the metrics file is `StepResult.to_json()`; `read_metrics` gives the results back.
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class LossMetrics:
    """The learner's step (node/rl/transfer); `skipped` when no row had a gradient to give."""

    loss: float = 0.0
    sequences: int = 0  # completions with at least one token in the loss
    tokens: int = 0
    dropped_tokens: int = 0  # tokens whose behaviour log-prob was impossible (non-finite or positive)
    implausible: int = 0  # received rows refused by the plausibility bounds
    distrusted: int = 0  # received rows of senders whose evidence reached trust.sender_bound (rl/transfer/guard.py)
    filtered: int = 0  # rows whose advantage the transfer policy's filter zeroed
    floored: int = 0  # received rows whose weight the policy raised (verified-imitation's floor)
    kept: int = 0
    filtered_frac: float = 0.0
    mean_weight: float = 1.0  # mean importance weight w over tokens
    truncated_frac: float = 0.0  # tokens with w above C
    received_weight: float = 0.0  # mean w over received tokens (what a sender's claims can raise; 0: none)
    received_truncated: float = 0.0  # received tokens with w above C, as a share of received tokens
    clip_frac: float = 0.0  # tokens whose PPO ratio was clipped
    div_sum_mean: float = 0.0  # divergence D (token sum), mean over rows
    div_sum_max: float = 0.0
    div_tok_mean: float = 0.0  # divergence per token, mean over rows
    grad_norm: float = 0.0  # before clipping
    anchors: int = 0  # our right completions the harm detector compared senders with (0: our own rows; alignment.py)
    skipped: bool = False


@dataclass
class SwarmMetrics:
    """Sharing in one step (node/swarm/exchange.py); all zero for a peer alone."""

    published: int = 0  # own groups in the published bundle
    unsent: int = 0  # own groups left out (bundle size limit)
    publish_ok: bool = True  # every publish collected so far succeeded
    bytes_out: int = 0
    groups_received: int = 0  # received groups decoded for the first time
    groups_used: int = 0  # received groups trained on
    foreign_used: int = 0  # of which from peers with another tokenizer (re-tokenized; swarm.foreign_tokenizers)
    uninformative: int = 0  # valid received groups not trained on: equal rewards (swarm.informative_only)
    duplicates: int = 0  # a sender's own earlier groups sent again (a restarted peer): not used, not refused
    credited: int = 0  # our groups other peers say (in their announcements) they trained on, in all
    credited_by: int = 0  # how many peers say so
    gated: int = 0  # received groups the transfer policy did not admit once it knew our greedy answer's reward
    #                 (verified-imitation, success-gated): ours was right already (or as good as their best)
    senders_used: int = 0
    rejected: dict[str, int] = field(default_factory=dict)  # reason -> records
    streams_refused: dict[str, int] = field(default_factory=dict)  # reason -> streams other peers opened to our
    #                                   pull handler this step that it refused (node/swarm/intake.py: rate, ...)
    bytes_in: int = 0
    polls: int = 0
    peers: int = 0  # other peers with a live group record at the last poll
    seconds: float = 0.0  # publish + gather
    wait_seconds: float = 0.0  # of which waiting for fresh groups
    cpu_seconds: float = 0.0  # CPU of the sharing on our main thread (discovery, publish, gather, receipts)
    network_cpu_seconds: float = 0.0  # CPU of our network thread (the DHT's event loop) during the step
    daemon_cpu_seconds: float = 0.0  # CPU of our network daemon (p2pd, a process of its own) during the step
    budget_hit: str = ""  # the per-step work budget that ended processing, if any
    late_fetches: int = 0  # DHT fetches not finished by the gather deadline (the step went on without them)
    pull_failures: int = 0  # pulls that found the sender gone or unreachable (backed off; not rejections)
    view: int = 0  # peers in our peer-sampling view after this step (node/swarm/gossip.py; 0 with gossip off)
    pushes: int = 0  # pushes taken this step (a peer's own announcement, pulled at its request)
    distrusted: int = 0  # senders distrusted after this step (their evidence reached trust.sender_bound)
    evidence: float = 0.0  # the largest evidence against one of this step's senders after it (honest: < 0 mostly)
    demoted: int = 0  # senders demoted after this step (their harm reached trust.harm_bound: node/rl/alignment.py)
    harm: float = 0.0  # the largest harm statistic of one of this step's senders after it
    alignment: float = 0.0  # mean over this step's senders of the cosine of their head gradient with our own's
    alignments: dict[str, float] = field(default_factory=dict)  # peer id -> that cosine (this step's senders)
    received_reward: float = 0.0  # mean reward (our verifier) of the received completions used
    received_from: dict[str, int] = field(default_factory=dict)  # sender (its peer id) -> groups decoded this step
    refused_from: dict[str, dict[str, int]] = field(default_factory=dict)  # sender -> reason -> records refused
    sender_weights: dict[str, list] = field(default_factory=dict)  # sender -> [its tokens in the loss, of which at
    #                                    the transfer policy's weight cap, their summed weight] (senders.py)


@dataclass
class GroupMetrics:
    """The group policy after the step (node/sagc/policy.py)."""

    straggler_rate: float = 0.0  # share of own groups that straggled
    summaries_used: int = 0  # length summaries (own and others') fed to the controller
    max_sender_evidence: float = 0.0  # the largest evidence one other peer's summaries carried
    lam: float = 0.0  # SAGC's dual variable lambda
    p_mean: dict[str, float] = field(default_factory=dict)  # size -> believed straggler probability


@dataclass
class StepResult:
    step: int
    reward: float  # mean sampled reward of this step's own completions
    group_size: int
    prompts: int
    gen_seconds: float
    learn_seconds: float
    tokens: int  # completion tokens generated
    padded_tokens: int = 0  # decode slots spent (a padded batch runs every row as long as its longest)
    step_seconds: float = 0.0
    cpu_seconds: float = 0.0  # CPU the step used: every thread of this process and our network daemon
    time: float = field(default_factory=time.time)  # wall clock (Unix seconds) when the step ended
    eval: dict[str, float] = field(default_factory=dict)  # held-out pass@1 after this step's update, when
    #                                                       evaluated (node/evaluation.py: "train/greedy", ...)
    eval_seconds: float = 0.0  # time the evaluation took (not in step_seconds)
    eval_before: dict[str, float] = field(default_factory=dict)  # held-out pass@1 before any update (first step)
    loss: LossMetrics = field(default_factory=LossMetrics)
    swarm: SwarmMetrics = field(default_factory=SwarmMetrics)
    group: GroupMetrics = field(default_factory=GroupMetrics)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, row: dict) -> StepResult:
        parts = {"loss": LossMetrics, "swarm": SwarmMetrics, "group": GroupMetrics}
        return cls(**{k: parts[k](**v) if k in parts else v for k, v in row.items()})


REJECTION_REASONS = {  # every reason a received record is counted as rejected (Totals.rejected's keys)
    "announcement": "an announcement that does not decode or verify",
    "busy": "a view its peer had served as often as it serves one (no miss: asked again later)",
    "digest": "a record whose bytes do not match the digest it was announced with",
    "drawn": "a group of an item its sender did not draw: another peer's, served as its own",
    "fetch": "reading the announcements failed this step",
    "future": "stamped in the future",
    "identity": "an announcement naming a peer id its signing key does not own",
    "length": "a completion longer than we generate",
    "logprob": "log-probabilities that no sampler could have produced",
    "malformed": "bytes that do not parse as a record",
    "missing": "a record its sender no longer holds",
    "other-task": "a group or announcement of another task than ours (a swarm trains one task)",
    "oversize": "a record over the size limits",
    "padded": "tokens after an end token, or completions cut at different lengths",
    "prompt": "prompt ids that are not the item's prompt",
    "shape": "fields whose sizes disagree",
    "signature": "a signature that does not verify",
    "stale": "older than our freshness window",
    "summary": "a length summary that does not decode",
    "task": "not an item of our task we can rebuild",
    "tokenizer": "a tokenizer we cannot use",
    "type": "a record of another kind than expected",
    "version": "a protocol version we do not read",
    "vocab": "token ids outside the vocabulary",
}


@dataclass
class Totals:
    """A node's running totals over this process's steps: fed once a step (`add`, by the run's RunLog) and read
    by the end summary, the control API (`swarm status`) and Prometheus, so the three never disagree."""

    steps: int = 0
    published: int = 0  # own groups published
    received: int = 0  # received groups decoded for the first time
    used: int = 0  # received groups trained on
    uninformative: int = 0  # valid received groups not trained on (equal rewards)
    duplicates: int = 0  # senders' own earlier groups sent again (restarted peers): benign, not used twice
    credited: int = 0  # our groups others say they trained on (the latest figure: it is a total already)
    credited_by: int = 0  # peers that say so
    distrusted: int = 0  # senders distrusted for good
    demoted: int = 0  # senders demoted
    bytes_in: int = 0
    bytes_out: int = 0
    peers_max: int = 0  # other peers seen at once, at most
    peers_last: int = 0  # other peers seen at the last step
    rejected: dict[str, int] = field(default_factory=dict)  # reason -> received records rejected
    streams_refused: dict[str, int] = field(default_factory=dict)  # reason -> streams our pull handler refused

    def add(self, result: StepResult) -> None:
        s = result.swarm
        self.steps += 1
        self.published += s.published
        self.received += s.groups_received
        self.used += s.groups_used
        self.uninformative += s.uninformative
        self.duplicates += s.duplicates
        self.credited, self.credited_by = max(self.credited, s.credited), max(self.credited_by, s.credited_by)
        self.distrusted += s.distrusted
        self.demoted += s.demoted
        self.bytes_in += s.bytes_in
        self.bytes_out += s.bytes_out
        self.peers_max = max(self.peers_max, s.peers)
        self.peers_last = s.peers
        for reason, count in s.rejected.items():
            self.rejected[reason] = self.rejected.get(reason, 0) + count
        for reason, count in s.streams_refused.items():
            self.streams_refused[reason] = self.streams_refused.get(reason, 0) + count


def metrics_writer(path: str | None):
    """A callable writing one JSON line per step (flushed, so `swarm local` can follow it), or a no-op."""
    if not path:
        return lambda result: None
    handle = open(path, "a")  # noqa: SIM115 (kept open for the run, closed at exit)

    def write(result: StepResult) -> None:
        handle.write(result.to_json() + "\n")
        handle.flush()

    return write


def truncate_metrics(path: str | None, steps_done: int) -> int:
    """A resumed run's metrics file keeps only the steps its checkpoint holds (those after it are done again);
    the file is rewritten whole (written beside, then renamed). Returns the lines dropped."""
    if not path or not Path(path).exists():
        return 0
    lines = Path(path).read_text().splitlines()
    kept = []
    for line in lines:
        try:
            if json.loads(line)["step"] < steps_done:
                kept.append(line)
        except (json.JSONDecodeError, KeyError, TypeError):
            continue  # a line cut by the kill
    tmp = Path(str(path) + ".tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    tmp.replace(path)
    return len(lines) - len(kept)


def read_metrics(path: str | Path) -> list[StepResult]:
    """The results in a metrics file, up to a line being written (or none when there is no file)."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(StepResult.from_dict(json.loads(line)))
        except (json.JSONDecodeError, TypeError):
            break  # a line being written
    return rows
