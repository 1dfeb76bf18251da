"""The experiments of the results page: its pairs, cells, settings and seeds, and the plan of runs they make
(`plan`, `verdict_plan`); each run a `Run`."""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


REAL_MODELS = ROOT / "docs" / "results" / "real-models" / "SECTION.md"  # measured by experiments/real_models.py, kept
STRAGGLER = ROOT / "docs" / "results" / "straggler" / "SECTION.md"  # section 4, written by experiments/straggler.py
OOD_ERRORS = ROOT / "docs" / "results" / "ood-errors" / "SECTION.md"  # section 0: experiments/trained_errors.py


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
                  "mix": "3. SAPO's mix", "mixed": "5. Mixed tokenizers"}


VARIANTS = ("alone", "nois", "vis", "tis", "f-nois", "f-vis", "f-tis")  # the F-TIS paper's (transfer policies)


SWARM_VARIANTS = VARIANTS[1:]  # those that share


MODEL_COST = {"small-add": 4.0, "part-add": 3.0, "smollm2-135m": 60.0}  # relative step cost of a model (tiny: 1)


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
    "plausible": ("part-sub", "part-add"),  # each has a quarter of the other's skill: its partner's right
    #  working is likely enough under it for importance weights to act (docs/results/transfer-weights)
    "long": ("check-sub", "check-add"),  # the complementary skills with a heavy tail of checks after each answer
    #  (task digits-check: long, uneven completions, where F-TIS's filter drops 7-19% of received rows)
    "lora": ("digit-add-bpe-lora", "digit-sub-bpe"),  # LoRA carries expert + full-tuning borrows expert
    "tokenizer": ("digit-sub-bpe", "digit-add"),  # BPE borrows expert + char carries expert
    "char": ("digit-sub", "digit-add"),  # the char tokenizer's pair (section 0's primary pair until 2026-12-04)
}


PAIR_SETTINGS = {  # settings every run of a pair carries (its Alone runs too): the long pair's own task and cap
    "long": (("task.name", "digits-check"), ("generation.max_new_tokens", "0")),
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
    ("HACPO", "hacpo", ()),  # received rows at a clipped sequence ratio scaled by the partners' capability
)


VERDICT_LABELS = tuple(label for label, _, _ in VERDICT_CELLS)


SECONDARY_CELLS = ("Alone", "F-TIS", "verified-imitation")  # the secondary pairs' cells (fewer seeds, said so)


ABLATION_CELLS = ("success-gated", "F-TIS-seq", "imitation, floor 0", "imitation, floor 2")  # the primary pair's
#                  fixes tried


REFERENCE_CELLS = ("Alone", "Alone-2x", "NoIS", "F-TIS", "F-TIS-or", "HACPO", "verified-imitation")  # the
#                  reference ablation: every transfer policy of the registry beside its two controls, every seed


REFERENCE_PAIRS = ("complementary", "plausible", "long")  # its pairs (every seed); the others are secondary


ABLATION_SEEDS = 3  # parts: at most this many seeds (the endpoint's comparisons, Alone, Alone-2x, NoIS, F-TIS and


#                     verified-imitation, take every seed)
PAGE_SECTIONS = "verdict"  # docs/RESULTS.md: the digits testbed; sections 1-3 and 5 are the earlier testbed


PAGE_CELLS = ("Alone", "Alone-2x", "NoIS", "F-TIS", "F-TIS-or", "HACPO", "success-gated",  # the page's cells of
              "verified-imitation")  # section 0: the reference ablation's and Mutual RL's rule; the others on request
PAGE_PAIRS = ("complementary", "plausible", "long", "lora", "tokenizer")  # the page's pairs (char on request)


DIGITS_BASE = {  # SAGC on (the default policy): G from 4, 8, 12, 16 each step
    "task": {"name": "digits"},
    "train": {"prompts_per_step": 8},
    "generation": {"max_new_tokens": 64},  # (the task's own cap, stated: the harness pins it)
    "swarm": {"received_groups": 8, "gather_deadline": 0.0},  # at most the partner's whole step (each cell names
    #                                                             its transfer policy)
    "eval": {"prompts": 256, "samples": 0},  # greedy pass@1 only: the endpoint (sampled pass@1 cost ~12% of a run)
}


SMOKE_CELLS = ("Alone", "Alone-2x", "F-TIS", "verified-imitation")  # the verdict's cells in smoke mode


SMOKE_VARIANTS = ("alone", "nois", "f-tis")  # section 1 in smoke mode (CI's time; the other variants are the


#                                             same loss code with other switches, tested in tests/rl)
FINAL_POINTS = 3  # evaluations averaged into a run's final accuracy


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


MIXES = ((8, 0), (6, 2), (4, 4), (2, 6))


ABLATIONS = (  # (label, settings) on the expertise pair; g = 50 (sum) and C = 2 are the F-TIS table's own runs
    *((f"g={g}", (("transfer.g", g),)) for g in ("5", "10", "100")),
    *((f"mean, g={g}", (("transfer.divergence", "mean"), ("transfer.g", g))) for g in ("0.5", "2")),
    ("every received group (informative_only off)", (("swarm.informative_only", "false"),)),
    *(("C=no cap" if c == "1e9" else f"C={c}", (("transfer.trunc_c", c),)) for c in ("1", "5", "1e9")),
)


def verdict_plan(seeds: int, steps: int, eval_every: int, pairs=tuple(VERDICT_PAIRS),
                 secondary_seeds: int = 2, labels=VERDICT_LABELS) -> list[Run]:
    """Section 0: the reference pairs' REFERENCE_CELLS and the primary pair's cells on `seeds` seeds (its
    ablation cells on at most ABLATION_SEEDS); the secondary pairs' SECONDARY_CELLS on fewer; `labels` keeps
    those cells only. A model's Alone runs are shared by every pair it is in (same seed, same prompts); a pair's
    PAIR_SETTINGS come first in each of its runs' settings."""
    runs: dict[str, Run] = {}
    primary = next(iter(VERDICT_PAIRS))
    for name in pairs:
        full = name in REFERENCE_PAIRS
        cells = [c for c in VERDICT_CELLS if (name == primary or c[0] in SECONDARY_CELLS
                                              or (full and c[0] in REFERENCE_CELLS)) and c[0] in labels]
        for seed in range(seeds if full else min(seeds, secondary_seeds)):
            for label, policy, settings in cells:
                if label in ABLATION_CELLS and seed >= ABLATION_SEEDS:
                    continue
                for models in ([(m,) for m in VERDICT_PAIRS[name]] if policy == "alone" else [VERDICT_PAIRS[name]]):
                    run = Run("verdict", models, policy, seed, steps, eval_every,
                              PAIR_SETTINGS.get(name, ()) + settings, label)
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
