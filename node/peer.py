"""One peer's training step: group size -> task -> generate -> reward -> share -> learn -> control.

The loop reads top to bottom in that order. Sharing (publish ours, gather others') happens only with
a transport; received groups arrive already validated and re-scored by node/swarm/exchange.py.
"""
from __future__ import annotations

import dataclasses
import random
import time
from pathlib import Path

from node.system.cpu import ThreadClock
from node.system.runtime import set_threads
from protocol.codec import LengthSummary

from .config import NodeConfig, with_completion_cap
from .evaluation import as_metrics, evaluate
from .generation import make_backend
from .generation.rollouts import Group, Received, has_variance, score_completion, score_group
from .metrics import StepResult, SwarmMetrics
from .models.loading import display_name, encode_prompt, load_model, source_of
from .models.zoo import recommended_lr
from .rl.learner import Learner
from .rl.transfer.registry import build_policy, resolved_config
from .sagc.policy import make_group_policy, prompts_for, size_seconds, summarize
from .swarm import SwarmTransport
from .swarm.exchange import GatherResult, GroupExchange, make_card
from .tasks import checks_work, completion_cap, get_task

ANCHORS = 16  # our own right completions kept as the harm detector's reference when our rows carry no advantage
PROBE_PROMPTS = 32  # training prompts answered greedily for anchors when we have too few (node/rl/alignment.py)
PROBE_BELOW = 4  # ... fewer anchors than this
PROBE_EVERY = 25  # steps between two probes at most once


def kept_anchors(anchors: list[Group], groups: list[Group]) -> list[Group]:
    """The anchors after adding the groups' completions our verifier calls right (reward 1), one a group,
    the newest ANCHORS kept."""
    right = [Group(g.item, g.prompt_ids, [c]) for g in groups for c in g.completions if c.reward >= 1.0]
    return (anchors + right)[-ANCHORS:]


def shuffle_rewards(groups: list[Group], rng: random.Random) -> None:
    """Ablation control: permutes rewards across the step's completions, cutting their link to the text."""
    completions = [c for g in groups for c in g.completions]
    rewards = [c.reward for c in completions]
    rng.shuffle(rewards)
    for c, r in zip(completions, rewards, strict=True):
        c.reward = r


class Peer:
    def __init__(self, cfg: NodeConfig, shuffle_control: bool = False, transport: SwarmTransport | None = None,
                 resume: Path | None = None, receipts_file: Path | None = None):
        """transport: None for a peer alone, else the swarm (node/swarm/dht.py, or node/swarm/memory.py);
        resume: a verified checkpoint folder whose model to load (node/persistence/checkpoint.py `resume_peer`
        restores the rest of its training state); receipts_file: where the signed receipts other peers give us
        are kept (node/swarm/receipts.py; None: nowhere)."""
        set_threads(cfg.generation.threads)
        self.task = get_task(cfg.task.name, cfg.task.data_files)
        self.eval_task = get_task(cfg.eval.task, cfg.task.data_files) if cfg.eval.task else self.task
        cfg = with_completion_cap(cfg, max(completion_cap(self.task), completion_cap(self.eval_task)))
        self.transfer = build_policy(cfg.transfer, checks_work(self.task))  # what a group teaches (auto resolved)
        self.cfg = cfg = dataclasses.replace(cfg, transfer=resolved_config(self.transfer))
        model_cfg = dataclasses.replace(cfg.model, name=str(resume / "model")) if resume else cfg.model
        self.loaded = load_model(model_cfg, seed=cfg.train.seed)
        self.backend = make_backend(cfg.generation, self.loaded, seed=cfg.train.seed)
        self.learner = Learner(self.loaded.model, self.backend.pad_id, cfg.train, cfg.loss, self.transfer,
                               cfg.generation.temperature, lr=self.learning_rate(), trust=cfg.trust)
        self.policy = make_group_policy(cfg)
        self.family = getattr(self.loaded.model.config, "model_type", "unknown")
        self.rng = random.Random(cfg.train.seed)
        self.shuffle_control = shuffle_control
        self.exchange = None
        if transport is not None and self.transfer.shares:  # alone: no sharing at all
            card = make_card(self.loaded.model, self.loaded.tokenizer, self.backend.name,
                             cfg.generation.temperature, cfg.generation.top_p, self.loaded.lora,
                             tokenizer_source=source_of(self.loaded.base))
            self.exchange = GroupExchange(transport, cfg.swarm, self.loaded.tokenizer, card, self.backend.eos_ids,
                                          self.task, cfg.generation.max_new_tokens, seed=cfg.train.seed,
                                          model=display_name(cfg.model.name), trust=cfg.trust,
                                          informative=self.transfer.informative,
                                          keep_uninformative=not cfg.swarm.informative_only,
                                          receipts_file=receipts_file)
        self.anchors: list[Group] = []  # our right completions, one a group, newest last (at most ANCHORS)
        self.probed: int | None = None  # the step of the last anchor probe
        self.start_step, self.history = 0, {}  # (a resumed peer's: node/persistence/checkpoint.py resume_peer)

    def transfer_line(self) -> str:
        """What a received group teaches this peer, in plain words (the start-up line)."""
        if self.exchange is None and self.transfer.shares:
            return f"transfer {self.transfer.label()}: no swarm, our own groups only"
        caveat = self.transfer.caveat(checks_work(self.task))
        return f"transfer {self.transfer.describe()}" + (f" ({caveat})" if caveat else "")

    def learning_rate(self) -> float:
        """The configured rate, else the one a saved model was trained with, else the model's recommended."""
        train, lora = self.cfg.train, self.loaded.lora
        chosen = train.lora_lr if lora else train.lr
        return chosen or self.loaded.trained_lr or recommended_lr(self.loaded.base, lora)

    def next_items(self, n: int):
        """This step's n training items: in a swarm drawn from our identity (node/swarm/draws.py: what binds our
        groups to us), alone from the seeded generator."""
        if self.exchange is not None:
            return self.exchange.draw_items(self.task, self.cfg.task.split, n)
        return [self.task.item(self.cfg.task.split, self.rng.randrange(2**31)) for _ in range(n)]

    def step(self, step: int) -> StepResult:
        before = self.evaluate()[0] if step == 0 and self.cfg.eval.every > 0 else {}
        self.announce_accuracy(before)
        step_start, cpu_start, network_start = time.perf_counter(), time.process_time(), self.network_cpu()
        sharing = ThreadClock()  # our main thread's CPU in the swarm's work
        if self.exchange is not None:
            with sharing:
                self.exchange.prefetch()  # other peers' records arrive while we generate
        train = self.cfg.train
        group_size = self.policy.choose()
        n_prompts = prompts_for(train.batch_mode, group_size, train.prompts_per_step, train.completions_per_step)
        items = self.next_items(n_prompts)
        prompts = [encode_prompt(self.loaded.tokenizer, item) for item in items]
        outputs, gen_seconds = self.backend.generate(prompts, group_size, seed=self.cfg.train.seed * 100003 + step)
        groups = [Group(item, p, comps, gen_seconds) for item, p, comps in zip(items, prompts, outputs, strict=True)]
        for group in groups:
            score_group(self.task, group)
        reward = sum(sum(g.rewards) for g in groups) / sum(len(g.completions) for g in groups)
        if self.shuffle_control:
            shuffle_rewards(groups, self.rng)
        own_summaries = [summarize(g, self.family, step) for g in groups]
        local = groups[: self.cfg.swarm.local_groups] if self.cfg.swarm.local_groups else groups
        if self.exchange is not None:
            self.exchange.step_under_way(time.perf_counter() - step_start)
        with sharing:
            received, swarm_metrics = self.share(groups, own_summaries, step, sum(len(g.completions) for g in local))
        taken = received.groups
        if taken and self.transfer.asks_greedy:
            taken = self.gate(taken, seed=self.cfg.train.seed * 100003 + step)
            swarm_metrics.gated = len(received.groups) - len(taken)
        if self.exchange is not None:
            with sharing:
                self.exchange.trained_on(taken, step)  # (signed receipts, with our next announcement)
        ledger = self.exchange.ledger if self.exchange is not None else None
        if ledger is not None and ledger.watches_alignment:
            self.keep_anchors(groups)
            if taken and not any(has_variance(g.rewards) for g in local):
                self.probe(step)
        start = time.perf_counter()
        loss_metrics = self.learner.step(local, taken, judge=ledger, anchors=self.anchors)
        if ledger is not None:
            verdicts = ledger.verdicts
            swarm_metrics.distrusted, swarm_metrics.evidence = verdicts.distrusted, verdicts.evidence
            swarm_metrics.demoted, swarm_metrics.harm = verdicts.demoted, verdicts.harm
            swarm_metrics.alignments = dict(verdicts.alignments)
            swarm_metrics.sender_weights = {peer: list(counts) for peer, counts in verdicts.weights.items()}
            swarm_metrics.alignment = (sum(verdicts.alignments.values()) / len(verdicts.alignments)
                                       if verdicts.alignments else 0.0)
        self.backend.sync(self.loaded.model)  # the next step samples from the updated weights
        learn_seconds = time.perf_counter() - start
        own_tokens = sum(sum(g.lengths) for g in local)
        group_metrics = self.policy.after_step(own_summaries, received.summaries, self.family,
                                               seconds=size_seconds(gen_seconds, learn_seconds, own_tokens,
                                                                    loss_metrics.tokens))
        tokens = sum(sum(g.lengths) for g in groups)
        padded = self.backend.decode_slots(groups)  # decode slots spent on our own groups
        network = [end - start for start, end in zip(network_start, self.network_cpu(), strict=True)]
        if self.exchange is not None:
            swarm_metrics.cpu_seconds = sharing.seconds
            swarm_metrics.network_cpu_seconds, swarm_metrics.daemon_cpu_seconds = network
        result = StepResult(step, reward, group_size, len(items), gen_seconds, learn_seconds, tokens, padded,
                            step_seconds=time.perf_counter() - step_start, loss=loss_metrics, swarm=swarm_metrics,
                            group=group_metrics, eval_before=before,
                            cpu_seconds=time.process_time() - cpu_start + network[1])
        if self.exchange is not None:
            self.exchange.own_step_took(result.step_seconds)
        if self.evaluates_after(step):
            result.eval, result.eval_seconds = self.evaluate()
            self.announce_accuracy(result.eval)
        return result

    def network_cpu(self) -> tuple[float, float]:
        """CPU our network has used in all: (its thread's, its daemon's); zeros when alone."""
        return self.exchange.transport.cpu_seconds() if self.exchange is not None else (0.0, 0.0)

    def gate(self, received: list[Received], seed: int) -> list[Received]:
        """The received groups the transfer policy admits once it knows our own greedy answer's reward b on each
        prompt (one greedy generation per group), each with its b (verified-imitation: a completion above b;
        success-gated: b < 1)."""
        scores = self.greedy_rewards([r.group for r in received], seed)
        return [dataclasses.replace(r, greedy=b) for r, b in zip(received, scores, strict=True)
                if self.transfer.admits(r.group.rewards, b)]

    def keep_anchors(self, groups: list[Group]) -> None:
        """Adds our sampled completions that our verifier calls right (reward 1) to the anchors, newest kept."""
        self.anchors = kept_anchors(self.anchors, groups)

    def probe(self, step: int) -> None:
        """With fewer than PROBE_BELOW anchors (at most once in PROBE_EVERY steps): our greedy answers to
        PROBE_PROMPTS training prompts (a fixed draw, apart from the training stream), the right ones kept."""
        if len(self.anchors) >= PROBE_BELOW or (self.probed is not None and step - self.probed < PROBE_EVERY):
            return
        self.probed = step
        rng = random.Random(self.cfg.train.seed * 7919 + 1)  # the same prompts at every probe
        items = [self.task.item(self.cfg.task.split, rng.randrange(2**31)) for _ in range(PROBE_PROMPTS)]
        prompts = [encode_prompt(self.loaded.tokenizer, item) for item in items]
        outputs, _ = self.backend.generate(prompts, 1, seed=self.cfg.train.seed * 100003 + step, greedy=True)
        for item, out in zip(items, outputs, strict=True):
            out[0].reward = score_completion(self.task, item, out[0])
        self.keep_anchors([Group(item, prompt, out) for item, prompt, out in zip(items, prompts, outputs,
                                                                                   strict=True)])

    def greedy_rewards(self, groups: list[Group], seed: int) -> list[float]:
        """Our own greedy completion's reward on each group's prompt (received groups are of our task)."""
        outputs, _ = self.backend.generate([g.prompt_ids for g in groups], 1, seed=seed, greedy=True)
        return [score_completion(self.task, group.item, out[0])
                for group, out in zip(groups, outputs, strict=True)]

    def evaluates_after(self, step: int) -> bool:
        """Whether held-out accuracy is measured after this step: every eval.every steps and after the last."""
        every, steps = self.cfg.eval.every, self.cfg.train.steps
        return every > 0 and ((step + 1) % every == 0 or step + 1 == steps)

    def announce_accuracy(self, scores: dict[str, float]) -> None:
        """Our latest held-out ID accuracy goes into our announcements (other peers' dashboards show it)."""
        if self.exchange is not None and "train/greedy" in scores:
            self.exchange.accuracy = scores["train/greedy"]

    def evaluate(self) -> tuple[dict[str, float], float]:
        """Held-out pass@1 of the current weights (node/evaluation.py) and the seconds it took."""
        scores, seconds = evaluate(self.backend, self.loaded.tokenizer, self.eval_task, self.cfg.eval)
        return as_metrics(scores), seconds

    def share(self, groups: list[Group], summaries: list[LengthSummary], step: int,
              own_completions: int) -> tuple[GatherResult, SwarmMetrics]:
        """Publishes this step's groups and gathers other peers' (nothing when alone); one sender may add at
        most swarm.max_sender_share x our own completions of the step."""
        if self.exchange is None:
            return GatherResult(), SwarmMetrics()
        start = time.perf_counter()
        published = self.exchange.publish(groups, summaries, step)
        sender_cap = max(1, int(own_completions * self.cfg.swarm.max_sender_share))
        received = self.exchange.gather(self.cfg.swarm.received_groups, sender_cap)
        credited, credited_by = self.exchange.credit.claimed()
        return received, SwarmMetrics(
            credited=credited, credited_by=credited_by,
            published=published.published, unsent=published.unsent, publish_ok=published.ok,
            bytes_out=published.bytes_out, groups_received=received.received, groups_used=len(received.groups),
            foreign_used=sum(r.foreign for r in received.groups),
            senders_used=received.senders, rejected=dict(received.rejected), bytes_in=received.bytes_in,
            polls=received.polls, peers=received.peers, seconds=time.perf_counter() - start,
            wait_seconds=received.waited, budget_hit=received.budget_hit, late_fetches=received.late_fetches,
            pull_failures=received.pull_failures, uninformative=received.uninformative,
            duplicates=received.duplicates, view=received.view, pushes=received.pushes,
            streams_refused=received.streams_refused, received_from=dict(received.received_from),
            refused_from={name: dict(reasons) for name, reasons in received.refused_from.items()},
            received_reward=(sum(sum(r.group.rewards) for r in received.groups)
                             / max(sum(len(r.group.completions) for r in received.groups), 1)))

    def known_peers(self) -> list[dict]:
        """Other peers known from their announcements (node/swarm/control.py: peer_info); none when alone."""
        return self.exchange.known_peers() if self.exchange is not None else []

    def credit(self) -> dict:
        """What other peers' signed receipts say they trained on of ours (control_pb2.Credit fields; empty when
        alone)."""
        if self.exchange is None:
            return {}
        receipts = self.exchange.credit.receipts
        c = receipts.credit
        return {"receipts": c.receipts, "receivers": c.receivers, "groups": c.groups, "rows": c.rows,
                "file": str(receipts.path) if receipts.path is not None else ""}

    def close(self) -> None:
        if self.exchange is not None:
            self.exchange.close()
        self.backend.close()
