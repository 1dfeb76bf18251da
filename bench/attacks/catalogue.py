"""The attack catalogue against a small local swarm, one run per attack, and a table.

Each run: a bootstrap and two honest `swarm join` processes (tiny-add full fine-tuning and tiny-add-lora, on
arith-add, seeds 0 and 1) for --steps steps, and a hostile peer (bench/attacks/hostile.py: its own hivemind node,
our wire format) publishing the attack every half second. The same swarm without an attacker is the control;
it runs twice, so the table also shows what two clean runs differ by (the noise band). Per attack: what the
honest peers refused (by reason) or dropped in the loss (implausible), their reward over the last 20 steps
against the control's, their median and worst step time, and their peak memory. The summary-flood attack
runs on tiny-count / count (where groups straggle) and reports the mean group size G instead. The made-up-work
attacks run on the digits task (digit-add and digit-add-lora, 8 prompts and up to 8 received groups a step)
against verified-imitation, whose floor lifts received right answers to weight 1; the digits verifier checks the
work (a right answer after made-up work scores 0), the floor's cap (transfer.floor_div) is the second line.

    python -m bench.attacks.catalogue [--steps 80] [--only poison-floor,clean] [--out bench/out/attacks]

Writes <out>/results.json (resumable: finished runs are kept) and <out>/table.md.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import CancelledError
from pathlib import Path

from bench.attacks import hostile
from node.app.local_swarm import SwarmProcesses
from node.config import SwarmConfig
from node.system.process import rss_mb
from node.system.runtime import quiet_libraries

HONEST = {"full": ("tiny-add", 0), "lora": ("tiny-add-lora", 1)}
COUNTING = {"full": ("tiny-count", 0), "lora": ("tiny-count", 1)}
DIGITS = {"full": ("digit-add", 0), "lora": ("digit-add-lora", 1)}  # carries experts that lack borrows
GATED = ["transfer.policy=verified-imitation"]  # the default where the work is checked (docs/ALGORITHMS.md)
PLAIN = ["transfer.policy=f-tis"]  # the paper's F-TIS (not the default on tasks whose verifier checks the work)
PEER_ARGS = ["--set", "train.prompts_per_step=16", "--set", "swarm.received_groups=16"]
DIGITS_ARGS = ["--set", "train.prompts_per_step=8", "--set", "swarm.received_groups=8"]  # the verdict's scale
POLICIES = ("verified-imitation", "success-gated", "hacpo", "nois")  # beside f-tis, arith-add's default: the
#   rows that measure an attack against each transfer policy (issue 54, 8), each with its own clean control
BEHAVE = 12  # behave-then-poison: the honest full peer's step at which the identities switch (issue 23, 4)


def received_mass(folder: Path, role: str, roles: list[str], behave: int) -> dict:
    """What one honest peer took from others (issue 54): the steps it trained on the other honest peer's groups,
    and over the steps (from `behave` on) that trained on received tokens, their mean weight w and share at the
    cap C (the median of the steps: a step without received tokens has no weight to average); and from `behave`
    on, per kind of sender (the honest partner; every other identity), its tokens in the loss, their mean weight
    and share at the cap, in all (the ledger's per-sender counts: metrics sender_weights)."""
    from node.metrics import read_metrics

    rows = read_metrics(folder / f"{role}.jsonl")
    partner = next((peer_id_of_file(folder / f"{other}.id") for other in roles if other != role), "")
    took = [r for r in rows[behave:] if r.loss.received_weight > 0]
    kinds = {"partner": [0, 0, 0.0], "others": [0, 0, 0.0]}
    for r in rows[behave:]:
        for sender, counts in r.swarm.sender_weights.items():
            kind = kinds["partner" if sender == partner else "others"]
            for i, x in enumerate(counts):
                kind[i] += x
    return {"partner_steps": sum(partner in r.swarm.alignments for r in rows),
            "received_weight": statistics.median(r.loss.received_weight for r in took) if took else 0.0,
            "received_truncated": statistics.median(r.loss.received_truncated for r in took) if took else 0.0,
            "by_sender": {kind: {"tokens": t, "mean_w": m / t if t else 0.0, "capped": c / t if t else 0.0}
                          for kind, (t, c, m) in kinds.items()}}


def peer_id_of_file(path: Path) -> str:
    """The peer id of a libp2p identity file ("" when there is none)."""
    from hivemind.p2p import PeerID

    return PeerID.from_identity(path.read_bytes()).to_base58() if path.is_file() else ""


def poison(claims: str, pad: int = 0):
    def build(v, dht, step):
        return "groups", [hostile.padding_poison(v, i, dht.now(), claims=claims, pad=pad)
                          for i in hostile.random_indices(step, 16)]
    return build


def cherry_pick(v, dht, step):
    return "groups", hostile.cherry_picked(v, hostile.random_indices(step, 8), dht.now(), seed=step)


def padded(how: str):
    def build(v, dht, step):
        return "groups", hostile.padded_groups(v, hostile.random_indices(step, 8), dht.now(), how=how, seed=step)
    return build


def stealth(v, dht, step):
    return "groups", [hostile.stealth_poison(v, i, dht.now()) for i in hostile.random_indices(step, 16)]




def made_up(work: str):
    def build(v, dht, step):
        return "groups", [hostile.made_up_work(v, i, dht.now(), work=work, seed=step)
                          for i in hostile.random_indices(step, 16)]
    return build


def replays(v, dht, step):
    """Every honest record seen so far, as published and re-stamped."""
    raw = dht.honest_records()
    return "groups", raw + [hostile.restamped(r, 10**6 + step, dht.now()) for r in raw]


def front_run(v, dht, step):
    """Every honest peer's latest groups, served as the attacker's own and stamped now (issue 54, 1: credit
    theft; before groups were bound to their generator, the partners' own copies were then refused as replays)."""
    return "groups", [hostile.restamped(r, step, float(int(dht.now()))) for r in dht.honest_records()]


ATTACKS: dict[str, tuple[str, Callable | None, dict]] = {
    # name: (what it is, builder(victim, dht, step) -> (kind, records) or None for a raw store, options)
    "clean": ("no attacker (control)", None, {}),
    "clean-again": ("no attacker, second run (noise band)", None, {}),
    "hub-task": ("gsm8k / math500 references", lambda v, d, s: (
        "groups", hostile.task_references(v, hostile.HUB_TASKS, d.now())), {}),
    "gym-flood": ("20 reasoning-gym references", lambda v, d, s: (
        "groups", hostile.task_references(v, hostile.GYM_TASKS, d.now())), {}),
    "long-completion": ("1000-token completions", lambda v, d, s: (
        "groups", [r for i in range(8) for r in hostile.long_completions(v, d.now(), index=s * 8 + i)]), {}),
    "unsigned-store": ("str/bytes subkeys, one expiry; 1e9 s expiry", "raw", {}),
    "foreign-long": ("BPE-tokenizer groups whose text re-tokenizes past our limit; a forged tokenizer",
                     lambda v, d, s: ("groups", [r for i in range(4)
                                                 for r in hostile.foreign_groups(v, d.now(), 5000 + s * 8 + 2 * i)]),
                     {}),
    "poison-published": ("30 '=' + answer, claims -30", poison("low", pad=30), {}),
    "poison-low": ("'=' padding within our limit, claims -30", poison("low"), {}),
    "poison-floor": ("padding, claims just inside the surprisal bound", poison("floor"), {}),
    "poison-matched": ("padding, claims = the zoo model's own", poison("matched"), {"with_model": True}),
    "poison-floor-hardened": ("poison-floor against transfer.negative_c=1", poison("floor"),
                              {"peer_set": ["transfer.negative_c=1"]}),
    "clean-hardened": ("control for transfer.negative_c=1", None, {"peer_set": ["transfer.negative_c=1"]}),
    "clean-digits-gated": ("control for made-up work (digit-add, verified-imitation, task digits)", None,
                           {"digits": True, "peer_set": GATED}),
    "work-random": ("right answers after random work, digits, against verified-imitation", made_up("random"),
                    {"digits": True, "peer_set": GATED}),
    "work-random-uncapped": ("work-random with the floor on every row (transfer.floor_div=1e9)", made_up("random"),
                             {"digits": True, "peer_set": [*GATED, "transfer.floor_div=1e9"]}),
    "work-other": ("right answers after another problem's work, against verified-imitation", made_up("other"),
                   {"digits": True, "peer_set": GATED}),
    "work-other-ftis": ("work-other against plain F-TIS (no floor)", made_up("other"),
                        {"digits": True, "peer_set": PLAIN}),
    "clean-digits": ("control for work-other-ftis (plain F-TIS, task digits)", None,
                     {"digits": True, "peer_set": PLAIN}),
    **{f"behave-{claims}-k{k}": (
        f"{k} identit{'y' if k == 1 else 'ies'} serve sampled groups (honest) until step {BEHAVE}, then "
        f"poison-{claims}", poison(claims), {"behave": BEHAVE, "identities": k, "with_model": True})
       for claims in ("floor", "matched") for k in (1, 4, 8)},
    **{f"stealth-k{k}": (f"{k} identities honest until step {BEHAVE}, then wrong rows at the weight cap padded "
                         f"with rows claimed near-certain", stealth, {"behave": BEHAVE, "identities": k,
                                                                       "with_model": True})
       for k in (4, 8)},
    "behave-low-k4": (f"4 identities honest until step {BEHAVE}, then poison-low", poison("low"),
                      {"behave": BEHAVE, "identities": 4, "with_model": True}),
    "behave-published-k4": (f"4 identities honest until step {BEHAVE}, then poison-published",
                            poison("low", pad=30), {"behave": BEHAVE, "identities": 4, "with_model": True}),
    "behave-only-k4": ("4 identities serving sampled groups (honest) throughout (control: what the "
                       "established identities' groups do)", None, {"behave": 10**9, "identities": 4,
                                                                    "with_model": True}),
    "empty-chunks": ("4 identities: a signed first chunk, then empty chunks until the reader gives up",
                     lambda v, d, s: ("groups", [hostile.plain(v, s * 8 + i, created=d.now()) for i in range(8)]),
                     {"identities": 4, "dht": hostile.EmptyChunkDHT}),
    "empty-chunks-control": ("control for empty-chunks: the same 4 identities serving the same groups whole",
                             lambda v, d, s: ("groups", [hostile.plain(v, s * 8 + i, created=d.now())
                                                         for i in range(8)]),
                             {"identities": 4}),
    "cherry-pick": ("32 samples a prompt, published: every right one up to 7 and one wrong, true log-probs",
                    cherry_pick, {"with_model": True}),
    "padded-eos": ("sampled groups, each stopped completion padded with '=' after its end token and ended again",
                   padded("eos"), {"with_model": True}),
    "padded-cap": ("sampled groups, each stopped completion's end token replaced by '=' up to the cap (as length)",
                   padded("cap"), {"with_model": True}),
    **{f"clean-{p}": (f"no attacker, transfer.policy={p} (control for its rows)", None,
                      {"peer_set": [f"transfer.policy={p}"], "control": "clean"}) for p in POLICIES},
    **{f"cherry-pick-{p}": (f"cherry-pick against transfer.policy={p}", cherry_pick,
                            {"with_model": True, "peer_set": [f"transfer.policy={p}"], "control": f"clean-{p}"})
       for p in POLICIES},
    **{f"padded-cap-{p}": (f"padded-cap against transfer.policy={p}", padded("cap"),
                           {"with_model": True, "peer_set": [f"transfer.policy={p}"], "control": f"clean-{p}"})
       for p in POLICIES},
    "replay": ("honest bundles replayed and re-stamped", replays, {}),
    "front-run": ("honest peers' latest groups served as its own, stamped now", front_run, {}),
    "future": ("groups stamped an hour ahead", lambda v, d, s: (
        "groups", [hostile.plain(v, s * 8 + i, created=d.now() + 3600) for i in range(8)]), {}),
    "summary-flood": ("256 'never straggles at 16' summaries a step", lambda v, d, s: (
        "summaries", hostile.summary_flood(step=10**6 + s)), {"counting": True}),
    "clean-counting": ("control for summary-flood (tiny-count on count)", None, {"counting": True}),
    "clean-counting-again": ("second control run (noise band of G)", None, {"counting": True}),
}


def attacker_loop(build, victim, dht, stop: threading.Event, sent: list[int], behaving=None,
                  identity: int = 0) -> None:
    """Publishes the attack every half second; behaving() True: sampled groups instead (honest behaviour). Its
    groups are of items its own identity drew (what any attacker can do), except where the attack is copying."""
    victim = victim.signed_by(dht.own_subkey)
    step = 0
    while not stop.wait(0.5):
        if build == "raw":
            hostile.unsigned_stores(dht)
            sent[0] += 9
        else:
            if behaving is not None and behaving():
                if step % 4:  # (sampling costs the attacker CPU beside the victims: a fresh bundle every 2 s)
                    step += 1
                    continue
                seed = 7919 * identity + step
                kind, records = "groups", hostile.sampled_groups(victim, hostile.random_indices(seed, 4), dht.now(),
                                                                 seed=seed)
            elif build is None:
                kind, records = "groups", []
            else:
                kind, records = build(victim, dht, step + 1000 * identity)
            try:
                if dht.publish_records(kind, records):
                    sent[0] += len(records)
            except CancelledError:  # the attacker's own DHT shut down mid-publish: the run is over
                return
            except RuntimeError:  # (its event loop closed under the publish, the same at the run's end)
                if stop.is_set():
                    return
                raise
        step += 1


def run(name: str, steps: int, out: Path) -> dict:
    about, build, options = ATTACKS[name]
    counting, digits = options.get("counting", False), options.get("digits", False)
    peers = COUNTING if counting else DIGITS if digits else HONEST
    task = "count" if counting else "digits" if digits else "arith-add"
    sp = SwarmProcesses(out / name)
    stop, sent, peak = threading.Event(), [0], {}
    attackers = []
    try:
        sp.start_bootstrap()
        for role, (model, seed) in peers.items():
            counting_sets = ["generation.max_new_tokens=32", "sagc.tau=1.5", "sagc.delta=0.15"] if counting else []
            sets = [arg for s in options.get("peer_set", []) + counting_sets for arg in ("--set", s)]
            sp.start_peer(role, "--model", model, "--seed", str(seed), "--task", task, "--steps", str(steps),
                          *(DIGITS_ARGS if digits else PEER_ARGS), *sets)
        if build is not None or "behave" in options:
            victim = hostile.victim_for(peers["full"][0], task, max_new_tokens=64 if digits else 8,
                                        with_model=options.get("with_model", False))
            behaving = None
            if "behave" in options:  # until the honest full peer's step `behave`
                behaving = lambda: len(sp.metrics("full")) < options["behave"]  # noqa: E731
            for identity in range(options.get("identities", 1)):
                node_class = options.get("dht", hostile.HostileDHT)
                attacker = node_class(SwarmConfig(initial_peers=(sp.address,)), card=victim.card)
                attackers.append(attacker)
                threading.Thread(target=attacker_loop, args=(build, victim, attacker, stop, sent, behaving, identity),
                                 daemon=True).start()
        while any(p.poll() is None for p in sp.peers.values()):
            for role, proc in sp.peers.items():
                with contextlib.suppress(OSError, IndexError):  # a process that just ended
                    peak[role] = max(peak.get(role, 0.0), rss_mb(proc.pid))
            time.sleep(0.2)
        bootstrap_alive = sp.bootstrap.poll() is None
    finally:
        stop.set()
        for attacker in attackers:
            attacker.shutdown()
        sp.stop()
    result = {"attack": name, "about": about, "sent": sent[0], "bootstrap_alive": bootstrap_alive, "peers": {}}
    for role in peers:
        rows = sp.metrics(role)
        rejected: dict[str, int] = {}
        for r in rows:
            for reason, n in r.swarm.rejected.items():
                rejected[reason] = rejected.get(reason, 0) + n
        step_seconds = [r.step_seconds for r in rows] or [0.0]
        result["peers"][role] = {
            "steps": len(rows), "exit": sp.peers[role].returncode, "rejected": rejected,
            "implausible": sum(r.loss.implausible for r in rows),
            "distrusted_rows": sum(r.loss.distrusted for r in rows),
            "distrusted_steps": [r.step for r in rows if r.swarm.distrusted for _ in range(r.swarm.distrusted)],
            "max_evidence_clean": max((r.swarm.evidence for r in rows[: options.get("behave", 0)]), default=0.0),
            **received_mass(sp.out, role, list(peers), options.get("behave", 0)),
            "reward_last20": statistics.mean(r.reward for r in rows[-20:]) if rows else 0.0,
            "mean_G": statistics.mean(r.group_size for r in rows) if rows else 0.0,
            "straggler_rate": statistics.mean(r.group.straggler_rate for r in rows) if rows else 0.0,
            "step_median": statistics.median(step_seconds), "step_max": max(step_seconds),
            "used_median": statistics.median(r.swarm.groups_used for r in rows) if rows else 0.0,
            "peak_rss_mb": peak.get(role, 0.0),
        }
    return result


def table(results: dict) -> str:
    controls = {False: results.get("clean"), True: results.get("clean-counting")}
    digit_controls = {True: results.get("clean-digits-gated"), False: results.get("clean-digits")}
    header = ("| attack | refused by the honest peers (full / LoRA) | reward, last 20 steps: attacked vs control "
              "(full; LoRA) | step s, median / max | received groups used / step, median | peak RSS MB | steps "
              "trained on the honest partner; received tokens' mean w; share at the cap C (from other identities: "
              "tokens, mean w, share at C) (full / LoRA) |")
    lines = [header, "|---|---|---|---|---|---|---|"]
    for name, res in results.items():
        counting = ATTACKS[name][2].get("counting", False)
        options = ATTACKS[name][2]
        if "control" in options:
            control = results.get(options["control"])
        elif options.get("digits"):
            control = digit_controls["transfer.policy=verified-imitation" in options.get("peer_set", [])]
        else:
            control = results.get("clean-hardened") if "hardened" in name else controls[counting]
        cells = []
        for p in res["peers"].values():
            refused = ", ".join(f"{k} {v}" for k, v in sorted(p["rejected"].items())) or "none"
            if p["implausible"]:
                refused += f"; implausible rows {p['implausible']}"
            if p.get("distrusted_rows") or p.get("distrusted_steps"):
                steps_at = p.get("distrusted_steps", [])
                refused += (f"; distrusted {len(steps_at)} sender(s) at step(s) "
                            f"{','.join(str(x) for x in sorted(set(steps_at))) or '-'}, rows {p['distrusted_rows']}")
            cells.append(refused)
        metric = "mean_G" if counting else "reward_last20"
        effect = "; ".join(
            f"{p[metric]:.3f} vs {control['peers'][role][metric]:.3f}" if control else f"{p[metric]:.3f}"
            for role, p in res["peers"].items())
        if counting:
            effect = "mean G " + effect + " (straggler rate " + " / ".join(
                f"{p['straggler_rate']:.2f}" for p in res["peers"].values()) + ")"
        steps = " / ".join(f"{p['step_median']:.2f} / {p['step_max']:.2f}" for p in res["peers"].values())
        rss = " / ".join(f"{p['peak_rss_mb']:.0f}" for p in res["peers"].values())
        used = " / ".join(f"{p.get('used_median', math.nan):.0f}" for p in res["peers"].values())
        survived = res["bootstrap_alive"] and all(p["exit"] == 0 for p in res["peers"].values())
        alive = "" if survived else " (a process died)"
        mass = " / ".join(f"{p['partner_steps']}; {p['received_weight']:.2f}; {100 * p['received_truncated']:.1f}%"
                          + by_sender(p) if "partner_steps" in p else "-" for p in res["peers"].values())
        lines.append(f"| {name}: {res['about']}{alive} | {' / '.join(cells)} | {effect} | {steps} | {used} | {rss} "
                     f"| {mass} |")
    return "\n".join(lines)


def by_sender(p: dict) -> str:
    """Others' tokens (every identity but the honest partner): their count, mean weight and share at the cap."""
    others = p.get("by_sender", {}).get("others", {})
    if not others.get("tokens"):
        return ""
    return f" (others: {others['tokens']} tok, w {others['mean_w']:.2f}, {100 * others['capped']:.1f}% at C)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--only", help="comma-separated attack names (default: all)")
    parser.add_argument("--out", default="bench/out/attacks")
    parser.add_argument("--fresh", action="store_true", help="forget finished runs")
    parser.add_argument("--retable", action="store_true", help="recompute what the honest peers took from others "
                        "(received_mass) from the finished runs' metrics, and the table")
    args = parser.parse_args()
    unknown = [n for n in (args.only or "").split(",") if n and n not in ATTACKS]
    if unknown:
        parser.error(f"unknown attack {', '.join(unknown)} (known: {', '.join(ATTACKS)})")
    quiet_libraries()  # no loading bars inside the progress lines
    import torch

    torch.set_num_threads(1)  # the attacker's own model (behave-*) on one core beside the victims
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = out / "results.json"
    results = {} if args.fresh or not store.exists() else json.loads(store.read_text())
    names = args.only.split(",") if args.only else list(ATTACKS)
    if args.retable:
        for name, res in results.items():
            roles = list(res["peers"])
            for role in roles:
                res["peers"][role].update(received_mass(out / name, role, roles, ATTACKS[name][2].get("behave", 0)))
        store.write_text(json.dumps(results, indent=1))
    todo = [] if args.retable else [n for n in names if n not in results or results[n].get("steps") != args.steps]
    started = time.monotonic()
    for i, name in enumerate(todo, 1):
        t0 = time.monotonic()
        print(f"[{i}/{len(todo)}] {name}: {ATTACKS[name][0]} ...", file=sys.stderr, flush=True)
        results[name] = {**run(name, args.steps, out), "steps": args.steps}
        done = time.monotonic() - started
        print(f"    done in {time.monotonic() - t0:.0f} s; about {done / i * (len(todo) - i):.0f} s left",
              file=sys.stderr, flush=True)
        store.write_text(json.dumps(results, indent=1))
    ordered = {n: results[n] for n in ATTACKS if n in results}
    text = table(ordered)
    (out / "table.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
