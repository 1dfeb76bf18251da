"""The move into the transfer room changed no rule: on two batches recorded from a real swarm (three zoo peers on
digits, one of them with a char tokenizer: foreign rows; the receiver's learner log-probs before its update), every
rule the node had before the move plans, bit for bit, the masks, weights and advantages it planned then.

Recorded at commit 48a5698 (before the move) with the old code: the receiver's batches of steps 4 and 5 of a
run of digit-sub-bpe beside digit-add-bpe and digit-add (seeds 7-9, 8 prompts a step), re-planned under each of
the old settings below; kept here as the batch's groups and log-probs and, for each setting, the SHA-256 of the
old plan's tensors (tests/rl/data/recorded_batches.pt.gz).

Bit for bit needs one arithmetic on every CPU: torch takes exp (the importance weights) from MKL, which picks its
code by the CPU it runs on (the recording's CPU and an AVX-512 Intel part differ in the last bit of some weights).
The plans are therefore made in a child process whose MKL runs its CPU-independent code (MKL_CBWR=COMPATIBLE,
MKL's conditional numerical reproducibility), the arithmetic the recording's machine used."""
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from node.config import TransferConfig, TrustConfig
from node.generation.rollouts import Completion, Group, Received
from node.rl.batching import build_batch, senders_of
from node.rl.transfer.plan import plan_loss
from node.rl.transfer.registry import build_policy

RULES = {  # the old setting (loss.variant and friends) -> the policy that is the same rule now, its settings
    "default": ("auto", ()),  # F-TIS + swarm.received_baseline greedy + loss.received_floor 1: the old default
    "default-f2": ("verified-imitation", (("floor", 2.0),)),  # ... with loss.received_floor 2
    "f-tis": ("f-tis", ()), "nois": ("nois", ()), "alone": ("alone", ()), "tis": ("tis", ()), "vis": ("vis", ()),
    "f-nois": ("f-nois", ()), "f-vis": ("f-vis", ()),
    "outcome": ("success-gated", ()),
    "f-tis-seq": ("f-tis", (("sequence_weights", True),)),  # loss.received_weights = sequence
    "f-tis-negc1": ("f-tis", (("negative_c", 1.0),)),
    "f-tis-rows-weight": ("f-tis", (("foreign_rows", "weight"),)),
    "f-tis-mean-g2": ("f-tis", (("divergence", "mean"), ("g", 2.0))),
}


class NobodyDistrusted:
    """The ledger's verdict in the recorded run: no sender's evidence reached the bound."""

    watches_alignment = False

    def judge_evidence(self, evidence):
        return set()

    def judge_alignment(self, cosines):
        pass

    def judge_weights(self, weights):
        pass


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()


def recorded():
    raw = gzip.decompress((Path(__file__).parents[1] / "data" / "recorded_batches.pt.gz").read_bytes())
    return torch.load(io.BytesIO(raw), weights_only=True)


def replan(rule: str) -> list[dict]:
    """Rule's plan of each recorded batch, as digests and counts (in this process's arithmetic)."""
    name, settings = RULES[rule]
    plans = []
    for batch_record in recorded():
        policy = build_policy(TransferConfig(name, settings), checks_work=True)
        own, received = [], []
        for g in batch_record["groups"]:
            group = Group(None, g["prompt_ids"], [Completion(c["token_ids"], c["logprobs"], c["finish_reason"],
                                                             reward=c["reward"]) for c in g["completions"]])
            if g["own"]:
                own.append(group)
            else:  # (the recorded baseline is our greedy reward, measured where the old rule asked for it)
                received.append(Received(group, g["sender"], g["foreign"], g["work_checked"],
                                         g["baseline"] if policy.asks_greedy else None))
        batch = build_batch(own, received, 0, lambda rewards, r, p=policy: p.advantages(rewards, r, 1e-4), False)
        plan = plan_loss(batch, batch_record["logp_ref"], policy, TrustConfig(), NobodyDistrusted(),
                         senders_of(received), 20.0)
        plans.append({"mask": digest(plan.mask), "weight": digest(plan.weight),
                      "advantages": digest(plan.advantages), "normaliser": list(plan.normaliser()),
                      "floored": plan.metrics.floored, "filtered": plan.metrics.filtered})
    return plans


@pytest.fixture(scope="module")
def replanned() -> dict[str, list[dict]]:
    """Every rule's plans, made in a child process with MKL's CPU-independent arithmetic (see above)."""
    child = subprocess.run([sys.executable, __file__], env={**os.environ, "MKL_CBWR": "COMPATIBLE"},
                           capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout)


def test_the_recorded_batches_hold_foreign_rows():
    assert any(g["foreign"] for b in recorded() for g in b["groups"])


@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_old_rule_plans_bit_for_bit_what_it_planned_before_the_move(rule, replanned):
    for plan, batch_record in zip(replanned[rule], recorded(), strict=True):
        old = batch_record["cases"][rule]
        assert plan["mask"] == old["mask"]
        assert plan["weight"] == old["weight"]
        assert plan["advantages"] == old["advantages"]
        assert tuple(plan["normaliser"]) == tuple(old["normaliser"])
        assert (plan["floored"], plan["filtered"]) == (old["floored"], old["filtered"])
        if rule == "default":  # the default's floor and the filter act in these batches
            assert old["floored"] > 0 and old["filtered"] > 0


if __name__ == "__main__":  # the child process of `replanned`
    print(json.dumps({rule: replan(rule) for rule in RULES}))
