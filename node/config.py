"""One tree of small dataclasses configures a peer.

Each field is documented once, here, in the comment beside it. Every dataclass validates itself at
construction, so an invalid value is caught before any model is loaded and reported as a single
`ConfigError` line naming the field (the CLI prints it and exits non-zero). Every subcommand resolves its
configuration the same way (`config_from_args`), from, in order of precedence: named flags and
`--set section.field=value`, environment variables `SWARM_SECTION__FIELD`, a TOML file (`--config`), the
subcommand's own defaults (a bootstrap's port, a peer that runs until stopped), and the defaults below. The
named flags are one table (`PEER_FLAGS`, `NETWORK_FLAGS`, `CLIENT_FLAGS`) of flag -> field.
"""
from __future__ import annotations

import dataclasses
import math
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from protocol import ANNOUNCE_SHARDS, MAX_RECORD_TTL

from .errors import ConfigError

AGGREGATIONS = ("grpo", "dapo")
SPLITS = ("train", "test")  # a task's train split is in distribution, its test split out of distribution
ENV_PREFIX = "SWARM_"


def _check(ok: bool, name: str, message: str, value) -> None:
    if not ok:
        raise ConfigError(f"{name} {message}, got {value!r}")


@dataclass(frozen=True)
class ModelConfig:
    name: str = "tiny-add"  # zoo name, local directory, or hub name (e.g. Qwen/Qwen2.5-0.5B-Instruct)
    lora: bool = False  # train a LoRA adapter instead of every parameter
    lora_rank: int = 8  # LoRA rank r
    lora_alpha: float = 16.0  # LoRA scaling numerator (scale = alpha / r)
    lora_dropout: float = 0.0  # dropout inside the adapter
    dtype: str = "float32"  # parameter dtype: float32 | bfloat16
    device: str = "auto"  # auto (cuda when available, else cpu) | cpu | cuda | cuda:N

    def __post_init__(self):
        _check(bool(self.name), "model.name", "must not be empty", self.name)
        _check(self.lora_rank >= 1, "model.lora_rank", "must be >= 1", self.lora_rank)
        _check(self.lora_alpha > 0, "model.lora_alpha", "must be > 0", self.lora_alpha)
        _check(0 <= self.lora_dropout < 1, "model.lora_dropout", "must be in [0, 1)", self.lora_dropout)
        _check(self.dtype in ("float32", "bfloat16"), "model.dtype", "must be float32 or bfloat16", self.dtype)
        _check(self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"), "model.device",
               "must be auto, cpu, cuda or cuda:N", self.device)


BACKENDS = ("transformers", "vllm")


@dataclass(frozen=True)
class GenerationConfig:
    backend: str = "transformers"  # transformers (the training model itself) | vllm (node/generation/vllm_backend.py)
    temperature: float = 1.0  # sampling temperature; behaviour log-probs are of the tempered distribution
    top_p: float = 1.0  # nucleus sampling mass; behaviour log-probs are renormalised over the nucleus
    max_new_tokens: int = 0  # completion length cap; a capped completion has finish reason "length"; 0: the
    #                          task's own cap (node/tasks: digits 64 for its worked columns, others 8)
    threads: int = 1  # torch threads in this process (2 threads on 2 busy cores run 20-40x slower)
    length_pieces: int = 2  # transformers backend: a step's prompts sorted by length and generated in up to this
    #                         many batches, each decoding until its own longest completion ends, when that pads
    #                         20% fewer prompt tokens (1: one batch)
    vllm_gpu_memory: float = 0.3  # vllm on a GPU: fraction of GPU memory for the engine (the learner needs the rest)
    vllm_kv_cache_gib: float = 0.0  # vllm: KV cache size; 0 = from vllm_gpu_memory on a GPU, 1 GiB on the CPU
    vllm_max_model_len: int = 0  # vllm: longest prompt + completion; 0 = the model's own limit (CPU: <= 8192)

    def __post_init__(self):
        _check(self.backend in BACKENDS, "generation.backend", f"must be one of {', '.join(BACKENDS)}",
               self.backend)
        _check(self.temperature > 0, "generation.temperature", "must be > 0", self.temperature)
        _check(0 < self.top_p <= 1, "generation.top_p", "must be in (0, 1]", self.top_p)
        _check(self.max_new_tokens >= 0, "generation.max_new_tokens", "must be >= 0 (0: the task's cap)",
               self.max_new_tokens)
        _check(self.threads >= 1, "generation.threads", "must be >= 1", self.threads)
        _check(self.length_pieces >= 1, "generation.length_pieces", "must be >= 1 (1: one batch)",
               self.length_pieces)
        _check(0 < self.vllm_gpu_memory < 1, "generation.vllm_gpu_memory", "must be in (0, 1)", self.vllm_gpu_memory)
        _check(self.vllm_kv_cache_gib >= 0, "generation.vllm_kv_cache_gib", "must be >= 0", self.vllm_kv_cache_gib)
        _check(self.vllm_max_model_len >= 0, "generation.vllm_max_model_len", "must be >= 0",
               self.vllm_max_model_len)


@dataclass(frozen=True)
class LossConfig:
    """The clipped policy-gradient objective every row is trained with, whatever taught its weight and advantage
    (what a received group teaches: [transfer]; what we believe of its sender: [trust])."""

    aggregation: str = "grpo"  # grpo: per-sequence token mean, then mean; dapo: token sum / total tokens (and
    #                            groups whose advantages are all zero are left out)
    # PPO clip of R = pi_theta / pi_theta_old: R = 1 at a batch's first update, so the clip acts from the second
    # of train.mini_batches updates on
    eps_low: float = 0.2  # PPO clip below 1 (F-TIS paper: 0.2)
    eps_high: float = 0.2  # PPO clip above 1 (F-TIS paper: 0.2; DAPO clip-higher: 0.28)
    eps_std: float = 1e-4  # added to the group reward std in the advantage denominator
    max_log_ratio: float = 20.0  # log-ratios are clamped to +-this before exp (defensive)

    def __post_init__(self):
        _check(self.aggregation in AGGREGATIONS, "loss.aggregation", "must be grpo or dapo", self.aggregation)
        _check(0 <= self.eps_low < 1, "loss.eps_low", "must be in [0, 1)", self.eps_low)
        _check(self.eps_high >= 0, "loss.eps_high", "must be >= 0", self.eps_high)
        _check(self.eps_std > 0, "loss.eps_std", "must be > 0", self.eps_std)
        _check(self.max_log_ratio > 0, "loss.max_log_ratio", "must be > 0", self.max_log_ratio)


@dataclass(frozen=True)
class TransferConfig:
    """What a received group teaches: a named transfer policy (node/rl/transfer; `swarm policies` lists them) and
    its own settings, written beside `policy` in the same table (e.g. [transfer] policy = "f-tis", g = 10): each
    policy's defaults are its vetted setting, and a setting it does not have is an error when the peer starts."""

    policy: str = "auto"  # auto: verified-imitation where our task's verifier checks the work, else f-tis
    options: tuple[tuple[str, typing.Any], ...] = ()  # (setting, value) pairs of the policy's own settings, sorted

    def __post_init__(self):
        _check(bool(self.policy), "transfer.policy", "must not be empty", self.policy)


@dataclass(frozen=True)
class TrustConfig:
    """What we believe about received data and its senders (node/rl/transfer/guard.py checks each received group;
    node/swarm/senders.py keeps the ledger of each sender)."""

    ratio_bound: float = 20.0  # b: a received group whose sum of log pi_theta - log pi_gen over all its tokens
    #                            exceeds b (+ ratio_bound_per_token per token) gives no gradient; an honest
    #                            sender's group does so with probability <= exp(-b) (docs/SECURITY.md)
    ratio_bound_per_token: float = 0.01  # allowance per token for numerical differences (e.g. bf16 engines)
    div_ceiling: float = 20.0  # a received completion whose per-token mean of log pi_gen - log pi_theta is above
    #                            this is implausibly unlikely under our model: no gradient (guards NoIS)
    sender_bound: float = 20.0  # b: a sender whose evidence (an e-detector on its claimed log-probs) reaches b is
    #                             distrusted for good, its rows dropped from that step on; an honest sender gets
    #                             there once in e^b steps on average (0: off)
    sender_bet: float = 0.5  # lambda in (0, 1): each received completion's bet (1 - lambda) + lambda * r
    harm_bound: float = 5.0  # a sender whose harm statistic (node/rl/alignment.py: a bet that its groups' gradient
    #                          points against our own groups') reaches this is demoted for demote_steps; one that
    #                          does not pull against us on average gets there once in e^5 steps at the very least,
    #                          a partner teaching what we lack (near-orthogonal) far less (0: off)
    harm_bet: float = 0.5  # lambda in (0, 1): each step's bet 1 - lambda * clip(2 cosine, -1, 1)
    demote_steps: int = 50  # steps a demoted sender is not pulled from; then it is tried afresh, as a newcomer

    def __post_init__(self):
        _check(self.ratio_bound > 0, "trust.ratio_bound", "must be > 0", self.ratio_bound)
        _check(self.ratio_bound_per_token >= 0, "trust.ratio_bound_per_token", "must be >= 0",
               self.ratio_bound_per_token)
        _check(self.div_ceiling > 0, "trust.div_ceiling", "must be > 0", self.div_ceiling)
        _check(self.sender_bound >= 0, "trust.sender_bound", "must be >= 0 (0: off)", self.sender_bound)
        _check(0 < self.sender_bet < 1, "trust.sender_bet", "must be in (0, 1)", self.sender_bet)
        _check(self.harm_bound >= 0, "trust.harm_bound", "must be >= 0 (0: off)", self.harm_bound)
        _check(0 < self.harm_bet < 1, "trust.harm_bet", "must be in (0, 1)", self.harm_bet)
        _check(self.demote_steps >= 1, "trust.demote_steps", "must be >= 1", self.demote_steps)


@dataclass(frozen=True)
class TrainConfig:
    lr: float = 0.0  # AdamW learning rate, full fine-tuning; 0: the model's recommended rate (zoo entry, else
    #                  the paper's 1e-6 for real models; 3e-4 for the tiny zoo models: node/models/zoo.py)
    lora_lr: float = 0.0  # AdamW learning rate through a LoRA adapter; 0: recommended (zoo 1e-3, else 1e-5)
    weight_decay: float = 0.0  # AdamW weight decay
    max_grad_norm: float = 1.0  # global gradient-norm clip (unclipped tiny-model runs collapsed)
    prompts_per_step: int = 32  # prompts this peer generates groups for in one step
    group_size: int = 8  # completions per prompt (G) under the fixed group policy
    group_policy: str = "sagc"  # sagc: the straggler-aware controller picks G each step; fixed: group_size
    batch_mode: str = "fixed_prompts"  # fixed_prompts: prompts_per_step, G varies the completions;
    #                                    fixed_completions: about completions_per_step, prompts = that / G
    completions_per_step: int = 256  # target completions per step in fixed_completions mode
    steps: int = 200  # training steps of a run
    seed: int = 0  # seeds sampling, task order and LoRA initialisation
    mini_batches: int = 1  # optimiser updates per step: the step's rows dealt into this many parts (PPO-style)
    micro_batch_tokens: int = 0  # padded tokens (rows x longest row) per forward/backward pass; gradients of an
    #                              update's micro-batches accumulate (bounds the learner's memory; 0: automatic,
    #                              a quarter of the device's memory from the model's sizes: node/rl/learner.py)
    length_pieces: int = 4  # an update in one piece runs its forward pass as up to this many passes over rows
    #                         of similar length, when that pads 20% fewer tokens (1: one pass; same gradient)
    gradient_checkpointing: bool = False  # recompute activations in the backward pass (less memory, more time)
    autocast: str = "none"  # none | bf16: the learner's forward and backward under bfloat16 autocast (GPUs)

    def __post_init__(self):
        _check(self.lr >= 0, "train.lr", "must be >= 0 (0: recommended)", self.lr)
        _check(self.lora_lr >= 0, "train.lora_lr", "must be >= 0 (0: recommended)", self.lora_lr)
        _check(self.weight_decay >= 0, "train.weight_decay", "must be >= 0", self.weight_decay)
        _check(self.max_grad_norm > 0, "train.max_grad_norm", "must be > 0", self.max_grad_norm)
        _check(self.prompts_per_step >= 1, "train.prompts_per_step", "must be >= 1", self.prompts_per_step)
        _check(self.group_size >= 2, "train.group_size", "must be >= 2 (advantages need a group)", self.group_size)
        _check(self.steps >= 0, "train.steps", "must be >= 0", self.steps)
        _check(self.group_policy in ("sagc", "fixed"), "train.group_policy", "must be sagc or fixed",
               self.group_policy)
        _check(self.batch_mode in ("fixed_prompts", "fixed_completions"), "train.batch_mode",
               "must be fixed_prompts or fixed_completions", self.batch_mode)
        _check(self.completions_per_step >= 2, "train.completions_per_step", "must be >= 2",
               self.completions_per_step)
        _check(self.mini_batches >= 1, "train.mini_batches", "must be >= 1", self.mini_batches)
        _check(self.micro_batch_tokens >= 0, "train.micro_batch_tokens", "must be >= 0 (0: automatic)",
               self.micro_batch_tokens)
        _check(self.length_pieces >= 1, "train.length_pieces", "must be >= 1 (1: one forward pass)",
               self.length_pieces)
        _check(self.autocast in ("none", "bf16"), "train.autocast", "must be none or bf16", self.autocast)


@dataclass(frozen=True)
class TaskConfig:
    name: str = "arith-add"  # task name (see `swarm tasks`): arith, gym:<reasoning-gym task>, gsm8k, math500
    split: str = "train"  # train | test (arith's test split is harder: out of distribution)
    data_files: str = ""  # local JSONL/parquet in the dataset's own format (gsm8k / math500 offline)

    def __post_init__(self):
        _check(bool(self.name), "task.name", "must not be empty", self.name)
        _check(self.split in SPLITS, "task.split", "must be train or test", self.split)


@dataclass(frozen=True)
class SAGCConfig:
    candidates: tuple[int, ...] = (4, 8, 12, 16)  # group sizes to choose from, ascending
    tau: float = 2.0  # a group straggles when max length > tau * median length (then over half of its padded
    #                   decode waits; 1.5 flags most even of the smallest groups on measured traces: docs/SAGC.md)
    delta: float = 0.3  # straggler-rate budget (the lowest the smallest size meets on those traces, with room)
    eta: float = 1.0  # dual step size (calibrated in bench/sim/sagc.py: 0.05 and 0.2 overshot the budget)
    lambda_max: float = 10.0  # upper bound of the dual variable
    prior_alpha: float = 1.0  # Beta prior of each size's straggler probability
    prior_beta: float = 1.0
    gamma: float = 0.95  # forgetting factor: each step, evidence decays towards the prior by this much
    neighbourhood: int = 1  # positions up or down the candidate list considered at each choice
    initial: int = 0  # first group size (0: the largest candidate)
    price_time: bool = True  # value a size per second of a step, log2(G) * c(current) / c(G) from our own
    #                          steps' measured seconds (where a step's cost grows with G, as at a fixed prompt
    #                          count on a CPU: docs/SAGC.md); false: log2(G) per step, the straggler paper's
    #                          objective (it holds the completions a step fixed, so every size costs the same)
    seed: int = 0  # Thompson-sampling generator seed
    peer_weight: float = 0.5  # evidence weight of another peer's group summary, same model family
    other_family_weight: float = 0.2  # evidence weight of a summary from another model family
    max_sender_summaries: int = 8  # one peer's summaries of a step weigh at most as much as this many (a
    #                                sender with more has each one scaled down): one sender's evidence per step
    #                                is bounded by max_sender_summaries * peer_weight
    max_foreign_evidence: float = 8.0  # all other peers' evidence about one size, in pseudo-observations, at
    #                                    most (kept apart from our own, which is not capped)

    def __post_init__(self):
        c = self.candidates
        _check(len(c) > 0, "sagc.candidates", "must not be empty", c)
        _check(all(isinstance(g, int) and g >= 2 for g in c), "sagc.candidates", "must be integers >= 2", c)
        _check(list(c) == sorted(set(c)), "sagc.candidates", "must be strictly ascending", c)
        _check(self.tau > 1, "sagc.tau", "must be > 1", self.tau)
        _check(0 < self.delta < 1, "sagc.delta", "must be in (0, 1)", self.delta)
        _check(self.eta > 0, "sagc.eta", "must be > 0", self.eta)
        _check(self.lambda_max > 0, "sagc.lambda_max", "must be > 0", self.lambda_max)
        _check(self.prior_alpha > 0, "sagc.prior_alpha", "must be > 0", self.prior_alpha)
        _check(self.prior_beta > 0, "sagc.prior_beta", "must be > 0", self.prior_beta)
        _check(0 < self.gamma <= 1, "sagc.gamma", "must be in (0, 1]", self.gamma)
        _check(self.neighbourhood >= 1, "sagc.neighbourhood", "must be >= 1", self.neighbourhood)
        _check(self.initial == 0 or self.initial in c, "sagc.initial", "must be 0 or a candidate", self.initial)
        _check(0 <= self.peer_weight <= 1, "sagc.peer_weight", "must be in [0, 1]", self.peer_weight)
        _check(0 <= self.other_family_weight <= 1, "sagc.other_family_weight", "must be in [0, 1]",
               self.other_family_weight)
        _check(self.max_sender_summaries >= 1, "sagc.max_sender_summaries", "must be >= 1",
               self.max_sender_summaries)
        _check(self.max_foreign_evidence > 0, "sagc.max_foreign_evidence", "must be > 0", self.max_foreign_evidence)


@dataclass(frozen=True)
class SwarmConfig:
    name: str = "default"  # swarm name: peers of different swarms never see each other's records
    initial_peers: tuple[str, ...] = ()  # bootstrap multiaddrs (empty: alone, or the first node)
    host: str = "127.0.0.1"  # interface the DHT listens on (0.0.0.0 in containers)
    port: int = 0  # DHT TCP port (0: any free port)
    announce: tuple[str, ...] = ()  # multiaddrs announced to others (public hosts behind NAT or docker)
    identity: str = ""  # identity file: a stable peer id (and record-signing key) across restarts
    client_mode: bool = False  # this peer cannot accept inbound connections (behind NAT or a firewall): it
    #                            serves no DHT requests, and others pull from it through its relays (the peers it
    #                            last pulled from, over the connection it opened; docs/PROTOCOL.md)
    startup_timeout: float = 30.0  # p2pd start-up time-out, seconds
    received_groups: int = 32  # budget: other peers' groups trained on per step (SAPO used 4 local + 4 received)
    local_groups: int = 0  # own groups trained on per step (0: all generated)
    informative_only: bool = True  # train only on received groups whose completions' rewards differ under our
    #                                verifier: a group that scores the same everywhere has zero advantage, teaches
    #                                nothing and costs learner time (counted as `uninformative`, not trained on)
    foreign_tokenizers: bool = True  # train on groups of peers with another tokenizer (one this machine can
    #                                  build: a zoo kind or a cached hub tokenizer), re-tokenized, with one
    #                                  sequence-level weight each (node/rl/transfer); off: refused ("tokenizer")
    gather_deadline: float = 0.5  # seconds a step waits for fresh groups at most (no barrier)
    pull_peers: int = 8  # senders pulled from at most in one step (their latest groups and summaries bundles)
    explore_pulls: int = 2  # pull slots kept for newcomers (senders not yet established by informative, valid
    #                         groups); all newcomers together contribute at most this many senders' caps a step
    shards_per_step: int = 8  # announcement shards read per step, in rotation (of protocol ANNOUNCE_SHARDS = 64);
    #                           while peer sampling fills the view, at most this many (node/swarm/directory.py)
    gossip: bool = True  # peer sampling (node/swarm/gossip.py): each step pull a sample of the views of two peers
    #                      (established senders first), push to one, and serve ours; while our view is empty,
    #                      pull our initial peers' views (a bootstrap keeps one); a view that holds anyone
    #                      replaces the whole-directory reads, and once it holds pull_peers senders, the DHT
    #                      rotation reads gossip_shards a step instead of shards_per_step
    gossip_shards: int = 0  # shards read per step once the view is full (0: none, the directory is the fallback
    #                         when the view thins; newcomers make themselves known by pushes): what keeps a
    #                         peer's cost flat in the swarm's size
    whole_read_every: float = 0.0  # seconds, without peer sampling (or while the view and the initial peers'
    #                                views have no one): while we know fewer senders than pull_peers (a small
    #                                swarm) all 64 shards are read at once, at most this often (every step
    #                                while we know none), in rotation in between: 30 cut the download at N = 5
    #                                to 0.34x, but a sender whose pull failed once stays "unreachable" (the
    #                                progress says alone) until its shard is read again; off (0: whole every
    #                                step) until that is fixed
    max_age: float = 120.0  # received groups older than this when their bundle arrived (seconds since the second
    #                         their sender drew the item: `created`) are stale; a peer whose steps take longer
    #                         than a third of it judges by 3 of its own steps, and by its updates rather than
    #                         the seconds between them (node/swarm/freshness.py)
    record_ttl: float = 120.0  # expiration of our published records, seconds (at most protocol MAX_RECORD_TTL)
    max_sender_share: float = 1.0  # completions one sender may contribute to a step, relative to our own
    #                                completions in that step (bounds one sender's share of the gradient)
    max_records_per_step: int = 256  # received records examined per step, rejected ones included
    max_bytes_per_step: int = 64 * 1024 * 1024  # received bytes unpacked and decoded per step
    max_receive_cpu: float = 2.0  # CPU seconds per step spent on received records (decode, rebuild, score)
    reannounce_every: float = 30.0  # seconds between re-announcements to the initial peers (a restarted
    #                                 bootstrap relearns the swarm); while alone, sooner, with back-off
    def __post_init__(self):
        _check(bool(self.name) and "/" not in self.name, "swarm.name", "must be non-empty without '/'", self.name)
        _check(0 <= self.port < 65536, "swarm.port", "must be in [0, 65535]", self.port)
        _check(self.startup_timeout > 0, "swarm.startup_timeout", "must be > 0", self.startup_timeout)
        _check(self.received_groups >= 0, "swarm.received_groups", "must be >= 0", self.received_groups)
        _check(self.local_groups >= 0, "swarm.local_groups", "must be >= 0", self.local_groups)
        _check(self.gather_deadline >= 0, "swarm.gather_deadline", "must be >= 0", self.gather_deadline)
        _check(self.pull_peers >= 1, "swarm.pull_peers", "must be >= 1", self.pull_peers)
        _check(1 <= self.explore_pulls <= self.pull_peers, "swarm.explore_pulls", "must be in [1, pull_peers]",
               self.explore_pulls)
        _check(self.whole_read_every >= 0, "swarm.whole_read_every", "must be >= 0 (seconds)", self.whole_read_every)
        _check(1 <= self.shards_per_step <= ANNOUNCE_SHARDS, "swarm.shards_per_step",
               f"must be in [1, {ANNOUNCE_SHARDS}]", self.shards_per_step)
        _check(0 <= self.gossip_shards <= ANNOUNCE_SHARDS, "swarm.gossip_shards",
               f"must be in [0, {ANNOUNCE_SHARDS}]", self.gossip_shards)
        _check(self.max_age > 0, "swarm.max_age", "must be > 0", self.max_age)
        _check(0 < self.record_ttl <= MAX_RECORD_TTL, "swarm.record_ttl", f"must be in (0, {MAX_RECORD_TTL:g}]",
               self.record_ttl)
        _check(self.max_sender_share > 0, "swarm.max_sender_share", "must be > 0", self.max_sender_share)
        _check(self.max_records_per_step >= 1, "swarm.max_records_per_step", "must be >= 1",
               self.max_records_per_step)
        _check(self.max_bytes_per_step >= 1, "swarm.max_bytes_per_step", "must be >= 1", self.max_bytes_per_step)
        _check(self.max_receive_cpu > 0, "swarm.max_receive_cpu", "must be > 0", self.max_receive_cpu)
        _check(self.reannounce_every > 0, "swarm.reannounce_every", "must be > 0", self.reannounce_every)


@dataclass(frozen=True)
class EvalConfig:
    every: int = 0  # held-out evaluation every this many steps and after the last one (0: never during training)
    task: str = ""  # task evaluated ("": the training task)
    prompts: int = 256  # held-out prompts per split (fixed item indices that training never draws)
    samples: int = 2  # sampled completions per prompt for sampled pass@1 (greedy pass@1 takes one; 0: greedy only)
    splits: tuple[str, ...] = ("train", "test")  # train: in distribution; test: out of distribution (arith:
    #                                            operands 20-99, count: 10-15); a split the task lacks is skipped
    batch: int = 256  # sequences per generate call while evaluating (bounds memory on real models)

    def __post_init__(self):
        _check(self.every >= 0, "eval.every", "must be >= 0 (0: never)", self.every)
        _check(self.prompts >= 1, "eval.prompts", "must be >= 1", self.prompts)
        _check(self.samples >= 0, "eval.samples", "must be >= 0 (0: greedy pass@1 only)", self.samples)
        _check(len(self.splits) > 0 and all(s in SPLITS for s in self.splits), "eval.splits",
               "must name train and/or test", self.splits)
        _check(self.batch >= 1, "eval.batch", "must be >= 1", self.batch)


@dataclass(frozen=True)
class CheckpointConfig:
    every: int = 50  # a checkpoint every this many steps (0: not by steps); also on a stop (SIGTERM, Ctrl-C)
    minutes: float = 10.0  # and when this many minutes passed since the last one (0: not by time)
    keep: int = 3  # the newest checkpoints kept (older ones are deleted once a new one is complete)

    def __post_init__(self):
        _check(self.every >= 0, "checkpoint.every", "must be >= 0 (0: not by steps)", self.every)
        _check(self.minutes >= 0, "checkpoint.minutes", "must be >= 0 (0: not by time)", self.minutes)
        _check(self.keep >= 1, "checkpoint.keep", "must be >= 1", self.keep)


@dataclass(frozen=True)
class NodeConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    transfer: TransferConfig = field(default_factory=TransferConfig)
    trust: TrustConfig = field(default_factory=TrustConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    sagc: SAGCConfig = field(default_factory=SAGCConfig)
    swarm: SwarmConfig = field(default_factory=SwarmConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def to_dict(self) -> dict:
        """{section: {field: value}}, as a TOML file holds it (a policy's settings sit beside transfer.policy)."""
        out = dataclasses.asdict(self)
        out["transfer"] = {"policy": self.transfer.policy, **dict(self.transfer.options)}
        return out


def with_completion_cap(cfg: NodeConfig, cap: int) -> NodeConfig:
    """cfg with generation.max_new_tokens = cap where it is 0 (the task's own cap: node/tasks completion_cap)."""
    if cfg.generation.max_new_tokens:
        return cfg
    return dataclasses.replace(cfg, generation=dataclasses.replace(cfg.generation, max_new_tokens=cap))


_KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


MAX_INT = 2**31 - 1  # no count, size, port or seed of a node is larger: beyond it a value is a typing mistake


def coerce_value(section: str, name: str, kind: type, raw):
    """Turns a TOML, environment or flag value into the field's type, or raises a ConfigError; integers beyond
    +-MAX_INT and numbers that are not finite are refused here, for every field."""
    value = _coerce_kind(section, name, kind, raw)
    where = f"{section}.{name}"
    if kind is int and abs(value) > MAX_INT:
        bound = f"at most {MAX_INT}" if value > 0 else f"at least {-MAX_INT}"
        raise ConfigError(f"{where} must be {bound}, got {raw!r}")
    if kind is float and not math.isfinite(value):
        raise ConfigError(f"{where} must be a finite number, got {raw!r}")
    return value


def _coerce_kind(section: str, name: str, kind: type, raw):
    where = f"{section}.{name}"
    if kind in (tuple[int, ...], tuple[str, ...]):
        inner = typing.get_args(kind)[0]
        items = [x.strip() for x in raw.split(",") if x.strip()] if isinstance(raw, str) else raw
        if not isinstance(items, (list, tuple)):
            raise ConfigError(f"{where} must be a list of {_KIND_NAMES[inner]}s, got {raw!r}")
        return tuple(coerce_value(section, name, inner, item) for item in items)
    if isinstance(raw, str) and kind is not str:
        text = raw.strip()
        if kind is bool:
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ConfigError(f"{where} must be true or false, got {raw!r}")
        try:
            return kind(text)
        except ValueError:
            raise ConfigError(f"{where} must be {_KIND_NAMES[kind]}, got {raw!r}") from None
    if kind is float and isinstance(raw, int) and not isinstance(raw, bool):
        return float(raw)
    if not isinstance(raw, kind) or (kind is int and isinstance(raw, bool)):
        raise ConfigError(f"{where} must be {_KIND_NAMES[kind]}, got {raw!r}")
    return raw


MOVED = {  # keys of earlier releases -> where the setting lives now (a clear error names it)
    **{f"loss.{name}": f"transfer.{name} (a setting of the policies that have it: `swarm policies`)"
       for name in ("trunc_c", "g", "divergence", "negative_c", "foreign_centering", "foreign_rows")},
    "loss.variant": "transfer.policy (alone, nois, f-tis, f-tis-or, verified-imitation, ...: `swarm policies`; "
                    "the outcome variant is now success-gated)",
    "loss.received_weights": "transfer.sequence_weights = true (policy f-tis and its kin)",
    "loss.received_floor": "transfer.floor (policy verified-imitation)",
    "loss.received_floor_div": "transfer.floor_div (policy verified-imitation)",
    "swarm.received_baseline": "transfer.policy: greedy is policy verified-imitation, sender the others",
    **{f"loss.{name}": f"trust.{name}" for name in ("ratio_bound", "ratio_bound_per_token", "div_ceiling",
                                                      "sender_bound", "sender_bet", "harm_bound", "harm_bet")},
    "swarm.demote_steps": "trust.demote_steps",
}
OPEN_SECTIONS = ("transfer",)  # sections whose fields beyond their own are their policy's settings


def _field_sections(name: str) -> list[str]:
    """The sections that have a field of this name."""
    return [f.name for f in dataclasses.fields(NodeConfig)
            if name in {g.name for g in dataclasses.fields(f.default_factory)}]


def build_config(values: dict[str, dict] | None = None) -> NodeConfig:
    """Builds a NodeConfig from {section: {field: value}}; unknown names are errors, not ignored."""
    values = values or {}
    sections = {f.name: f for f in dataclasses.fields(NodeConfig)}
    for section, entries in values.items():
        if section in sections and isinstance(entries, dict):
            continue
        if section in sections:
            raise ConfigError(f"configuration section [{section}] must be a table of fields, got {entries!r}")
        owners = _field_sections(section)
        hint = (f"; did you mean [{owners[0]}] {section} = ...?" if owners
                else f" (sections: {', '.join(f'[{name}]' for name in sections)})")
        if isinstance(entries, dict):
            raise ConfigError(f"unknown configuration section [{section}]{hint}")
        raise ConfigError(f"configuration key {section!r} is not inside a section: every field belongs to one"
                          f"{hint}")
    built = {}
    for section, sfield in sections.items():
        cls = sfield.default_factory
        hints = typing.get_type_hints(cls)
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs, options = {}, {}
        for name, raw in values.get(section, {}).items():
            if f"{section}.{name}" in MOVED:
                raise ConfigError(f"configuration field {section}.{name} has moved: use {MOVED[f'{section}.{name}']}")
            if section in OPEN_SECTIONS and name not in known:
                options[name] = raw  # checked against the chosen policy's own settings when the peer starts
                continue
            if name not in known:
                raise ConfigError(f"unknown configuration field {section}.{name}")
            kwargs[name] = coerce_value(section, name, hints[name], raw)
        if options:
            kwargs["options"] = tuple(sorted(options.items()))
        built[section] = cls(**kwargs)
    return NodeConfig(**built)


def merge(base: dict, extra: dict) -> dict:
    """{section: {field: value}} layers: `extra` wins field by field."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for section, entries in extra.items():
        if isinstance(entries, dict) and isinstance(out.get(section), dict):
            out[section].update(entries)
        else:
            out[section] = entries
    return out


def parse_assignments(items: list[str]) -> dict[str, dict]:
    """Parses ["loss.trunc_c=2", ...] into {"loss": {"trunc_c": "2"}}."""
    out: dict[str, dict] = {}
    for item in items:
        key, sep, value = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot or not section or not name:
            raise ConfigError(f"--set expects section.field=value, got {item!r}")
        out.setdefault(section, {})[name] = value
    return out


def is_config_variable(name: str) -> bool:
    """Whether an environment variable sets a configuration field (SWARM_SECTION__FIELD)."""
    return name.startswith(ENV_PREFIX) and "__" in name


def env_assignments(environ: dict[str, str] | None = None) -> dict[str, dict]:
    """Reads SWARM_SECTION__FIELD=value variables (for containers), e.g. SWARM_LOSS__TRUNC_C=2."""
    environ = os.environ if environ is None else environ
    out: dict[str, dict] = {}
    for key, value in environ.items():
        if is_config_variable(key):
            section, _, name = key[len(ENV_PREFIX):].partition("__")
            out.setdefault(section.lower(), {})[name.lower()] = value
    return out


def read_toml(path: str | Path) -> dict:
    try:
        return tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"configuration file {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"configuration file {str(path)!r} cannot be read: {err}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"configuration file {str(path)!r} is not valid TOML: {err}") from None


def load_config(path: str | Path | None = None, overrides: dict[str, dict] | None = None,
                environ: dict[str, str] | None = None, defaults: dict[str, dict] | None = None) -> NodeConfig:
    """The layers, lowest first: the dataclass defaults, `defaults` (a subcommand's own, e.g. a bootstrap's
    port), the TOML file, the environment, then `overrides` (CLI flags and --set)."""
    values = merge(defaults or {}, read_toml(path) if path else {})
    values = merge(values, env_assignments(environ))
    values = merge(values, overrides or {})
    return build_config(values)


def write_config(cfg: NodeConfig, path: str | Path) -> Path:
    """Writes a resolved configuration as TOML that `load_config` reads back to the same NodeConfig."""
    import tomli_w

    Path(path).write_text(tomli_w.dumps(cfg.to_dict()))
    return Path(path)


def field_default(key: str, defaults: dict[str, dict] | None = None):
    """The default of "section.field" (a subcommand's own default first)."""
    section, _, name = key.partition(".")
    if name in (defaults or {}).get(section, {}):
        return defaults[section][name]
    cls = {f.name: f.default_factory for f in dataclasses.fields(NodeConfig)}[section]
    return {f.name: f for f in dataclasses.fields(cls)}[name].default


# ---- command-line flags ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Flag:
    """A command-line flag for one configuration field (the field's value type and validation apply)."""

    flag: str
    key: str  # section.field
    help: str
    repeat: bool = False  # may be repeated (and comma-separated): a list field
    switch: bool = False  # takes no value: sets a bool field to true


PEER_FLAGS = (
    Flag("--model", "model.name", "zoo name, local directory or hub name"),
    Flag("--lora", "model.lora", "train a LoRA adapter", switch=True),
    Flag("--task", "task.name", "task name (see `swarm tasks`; `swarm`: the task the swarm's peers announce)"),
    Flag("--split", "task.split", "train or test"),
    Flag("--steps", "train.steps", "training steps (0: until stopped)"),
    Flag("--group-policy", "train.group_policy", "sagc or fixed"),
    Flag("--group-size", "train.group_size", "completions per prompt (G) under --group-policy fixed"),
    Flag("--batch-mode", "train.batch_mode", "fixed_prompts or fixed_completions"),
    Flag("--prompts", "train.prompts_per_step", "prompts per step"),
    Flag("--seed", "train.seed", "seeds sampling, task order and LoRA initialisation"),
    Flag("--lr", "train.lr", "learning rate, full fine-tuning (0: the model's recommended rate)"),
    Flag("--mini-batches", "train.mini_batches", "optimiser updates per step (PPO-style; the clip acts from the "
         "second)"),
    Flag("--micro-batch-tokens", "train.micro_batch_tokens", "padded tokens per learner forward/backward pass "
         "(gradient accumulation; 0: automatic, a quarter of the device's memory)"),
    Flag("--transfer", "transfer.policy", "what a received group teaches: a transfer policy (`swarm policies`); "
         "auto: verified-imitation where the task's verifier checks the work, else f-tis"),
    Flag("--aggregation", "loss.aggregation", "grpo or dapo"),
    Flag("--threads", "generation.threads", "torch threads"),
    Flag("--backend", "generation.backend", "generation backend: transformers or vllm"),
    Flag("--eval-every", "eval.every", "held-out evaluation every N steps and at the end (0: never)"),
    Flag("--checkpoint-every", "checkpoint.every", "checkpoint into --out every N steps (0: not by steps)"),
    Flag("--checkpoint-minutes", "checkpoint.minutes", "and every M minutes (0: not by time)"),
    Flag("--keep-checkpoints", "checkpoint.keep", "newest checkpoints kept"),
)
EVAL_FLAGS = (  # `swarm eval`
    Flag("--eval-prompts", "eval.prompts", "held-out prompts per split"),
    Flag("--eval-samples", "eval.samples", "sampled completions per prompt (sampled pass@1; 0: greedy only)"),
    Flag("--eval-splits", "eval.splits", "splits to evaluate: train (in distribution), test (out of it)"),
)
NETWORK_FLAGS = (
    Flag("--swarm", "swarm.name", "swarm name"),
    Flag("--initial-peers", "swarm.initial_peers", "bootstrap or peer multiaddr (repeat, or comma-separate)",
         repeat=True),
    Flag("--identity", "swarm.identity", "identity file: a stable peer id across restarts"),
    Flag("--host", "swarm.host", "interface to listen on (0.0.0.0 in containers)"),
    Flag("--port", "swarm.port", "DHT TCP port (0: any free port)"),
    Flag("--announce", "swarm.announce", "address to announce (public hosts)", repeat=True),
    Flag("--startup-timeout", "swarm.startup_timeout", "p2pd start-up time-out, seconds"),
)
CLIENT_FLAGS = (  # a peer's only (a bootstrap must accept connections)
    Flag("--client-mode", "swarm.client_mode", "no inbound connections (NAT, firewall): others pull through "
         "relays", switch=True),
)


def _shown(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "none"
    return str(value) if value != "" else "none"


def add_config_arguments(parser, flags: tuple[Flag, ...], defaults: dict[str, dict] | None = None) -> None:
    """--config, --set and the given flags on an argparse parser; each help shows the field's default."""
    if not any(a.dest == "config" for a in parser._actions):
        parser.add_argument("--config", help="TOML file with [model] [generation] [loss] [transfer] [trust] "
                                             "[train] [task] [sagc] [swarm] [eval] [checkpoint] tables (environment "
                                             "SWARM_SECTION__FIELD and flags win)")
        parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                            help="set any configuration field (wins over everything else)")
    for f in flags:
        dest = "cfg:" + f.key
        shown = f"{f.help} (default: {_shown(field_default(f.key, defaults))})"
        if f.switch:
            parser.add_argument(f.flag, dest=dest, action="store_const", const="true", help=shown)
        elif f.repeat:
            parser.add_argument(f.flag, dest=dest, action="append", metavar="VALUE", help=shown)
        else:
            parser.add_argument(f.flag, dest=dest, metavar="VALUE", help=shown)


def flag_assignments(args) -> dict[str, dict]:
    """The configuration flags given on the command line, then --set (which wins), as assignments."""
    pairs = []
    for dest, value in vars(args).items():
        if dest.startswith("cfg:") and value is not None:
            pairs.append(f"{dest[4:]}={','.join(value) if isinstance(value, list) else value}")
    return parse_assignments(pairs + list(getattr(args, "set", None) or []))


def config_from_args(args, defaults: dict[str, dict] | None = None) -> NodeConfig:
    """The one path from a parsed command line to a configuration: defaults, file, environment, flags."""
    return load_config(getattr(args, "config", None), flag_assignments(args), defaults=defaults)

