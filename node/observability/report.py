"""What a run shows: a progress display for long runs, the final summary, and reward plots (matplotlib,
headless)."""
from __future__ import annotations

import collections
import json
import statistics
import sys
import time
from pathlib import Path

from node.metrics import StepResult, Totals


def window_mean(values: list[float], frac: float = 0.1, head: bool = True) -> float:
    """Mean of the first (head) or last frac of values (at least one value)."""
    if not values:
        return 0.0
    k = max(1, int(len(values) * frac))
    part = values[:k] if head else values[-k:]
    return sum(part) / len(part)


def format_step(result: StepResult, total: int, elapsed: float, recent: list[float]) -> str:
    """One progress line. total 0 (a run until stopped) shows the step alone; the swarm part (peers seen at
    the last poll; groups sent, received, trained on and rejected this step) only when the peer shares."""
    avg = sum(recent) / len(recent) if recent else 0.0
    step = f"{result.step + 1:>4}/{total}" if total else f"{result.step + 1:>6}"
    s = result.swarm
    trust = "".join(f"{name} {n} " for name, n in (("distrusted", s.distrusted), ("demoted", s.demoted)) if n)
    shared = (f"peers {s.peers} out {s.published} in {s.groups_received} used {s.groups_used} "
              f"rej {sum(s.rejected.values())} given {s.credited} {trust} " if s.polls or s.published else "")
    return (f"step {step}  reward {result.reward:.3f} (avg{len(recent):>3} {avg:.3f})  "
            f"G {result.group_size:>2} strag {result.group.straggler_rate:.2f} lam {result.group.lam:.2f}  "
            f"{shared}|grad| {result.loss.grad_norm:.3f}  w {result.loss.mean_weight:.3f}  "
            f"gen {result.gen_seconds:.2f}s learn {result.learn_seconds:.2f}s  {elapsed:.0f}s")


PROGRESS_COLUMNS = """progress columns: step (of total), sampled reward of own completions (and its recent average),
G (group size) strag (share of own groups that straggled) lam (SAGC's lambda); in a swarm: peers (other peers
seen at the last poll), out (own groups published), in (received groups decoded), used (received groups
trained on), rej (received records rejected), given (our groups other peers say they trained on, in all), and,
on a step that had any, distrusted (senders distrusted for
good: false log-probs) and demoted (senders whose groups pulled against ours); |grad| (gradient norm before
clipping), w (mean importance weight), gen / learn (seconds generating / learning), elapsed seconds"""


class Progress:
    """One rewritten line on a terminal; a plain line every `every` steps otherwise (logs, CI)."""

    def __init__(self, total: int, stream=None, every: int = 10, window: int = 20):
        self.total, self.every = total, every
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.start = time.monotonic()
        self.rewards: collections.deque[float] = collections.deque(maxlen=window)

    def update(self, result: StepResult) -> None:
        self.rewards.append(result.reward)
        line = format_step(result, self.total, time.monotonic() - self.start, list(self.rewards))
        if self.tty:
            self.stream.write("\r" + line + "\x1b[K")
            if result.step + 1 == self.total:
                self.stream.write("\n")
        elif (result.step + 1) % self.every == 0 or result.step + 1 == self.total:
            self.stream.write(line + "\n")
        self.stream.flush()

    def say(self, line: str) -> None:
        """A line of its own (e.g. alone / rejoined), not overwritten by the next progress line."""
        self.stream.write(("\n" if self.tty else "") + line + "\n")
        self.stream.flush()


class Presence:
    """Says plainly when a sharing peer has seen no other peer for `patience` steps in a row (it trains on its
    own groups only), and when others are back. Pure: steps in, lines out."""

    def __init__(self, patience: int = 5):
        self.patience, self.empty, self.alone = patience, 0, False

    def update(self, peers: int) -> str | None:
        if peers > 0:
            self.empty = 0
            if self.alone:
                self.alone = False
                return f"rejoined: {peers} other peer{'s' if peers != 1 else ''} seen; training on their groups again"
            return None
        self.empty += 1
        if self.empty == self.patience and not self.alone:
            self.alone = True
            return (f"alone: no other peer seen for {self.patience} steps; training on own groups only "
                    f"(still announcing, still looking)")
        return None


def evaluations(r: StepResult) -> list[list]:
    """[steps done, ID greedy pass@1, OOD greedy pass@1 (None: not evaluated)] of each held-out evaluation a
    step's result holds: the one before training (at r.step) and the one after the step (at r.step + 1)."""
    return [[steps_done, scores.get("train/greedy"), scores.get("test/greedy")]
            for steps_done, scores in ((r.step, r.eval_before), (r.step + 1, r.eval))
            if "train/greedy" in scores or "test/greedy" in scores]


class RunLog:
    """What the end summary and the reward plot need from a run, in memory that does not grow with the run's
    length: the first and last rewards, recent step times, running totals, and the reward curve as means of
    buckets of steps (adjacent buckets merge when there are more than `points`). `state()` goes into a
    checkpoint, so a resumed run plots its whole curve."""

    def __init__(self, total: int, window: int = 1000, points: int = 1000, totals: Totals | None = None):
        """totals: the node's running totals, fed here once a step (`swarm status` and Prometheus read them)."""
        self.totals = totals if totals is not None else Totals()
        self.window = min(max(1, total // 10), window) if total else 100  # steps in "first" / "last"
        self.points = points
        self.steps = self.tokens = 0
        self.gen_total = 0.0
        self.head: list[float] = []
        self.tail: collections.deque[float] = collections.deque(maxlen=self.window)
        self.gen: collections.deque[float] = collections.deque(maxlen=window)
        self.learn: collections.deque[float] = collections.deque(maxlen=window)
        self.eval_before: dict[str, float] = {}
        self.last_eval: dict[str, float] = {}
        self.curve: list[float] = []  # mean reward of each bucket of `bucket` steps
        self.bucket, self.partial = 1, []
        self.evals: list[list] = []  # [steps done, ID greedy pass@1, OOD (None: not evaluated)] per evaluation
        self.resumed_at = 0  # steps done before this process (a resumed run)
        self.curve_start = 0  # the step the curve starts at (a resumed run whose checkpoint had no curve)

    def add(self, r: StepResult) -> None:
        self.steps += 1
        self.tokens += r.tokens
        self.gen_total += r.gen_seconds
        if len(self.head) < self.window:
            self.head.append(r.reward)
        self.tail.append(r.reward)
        self.gen.append(r.gen_seconds)
        self.learn.append(r.learn_seconds)
        self.eval_before = self.eval_before or dict(r.eval_before)
        self.last_eval = dict(r.eval) or self.last_eval
        self.evals += evaluations(r)
        if len(self.evals) > self.points:  # a very long run: every other evaluation, the newest kept
            self.evals = self.evals[::-1][::2][::-1]
        self.totals.add(r)
        self.partial.append(r.reward)
        if len(self.partial) == self.bucket:
            self.curve.append(sum(self.partial) / self.bucket)
            self.partial = []
            if len(self.curve) > self.points and len(self.curve) % 2 == 0:  # merge pairs: buckets twice as long
                self.curve = [(self.curve[i] + self.curve[i + 1]) / 2 for i in range(0, len(self.curve), 2)]
                self.bucket *= 2

    def rewards_curve(self) -> tuple[list[float], list[float]]:
        """(step, mean reward) points of the whole run, resumed part included."""
        values = self.curve + ([sum(self.partial) / len(self.partial)] if self.partial else [])
        steps = [self.curve_start + (i + 0.5) * self.bucket for i in range(len(values))]
        return steps, values

    def curves(self) -> dict:
        """What the dashboard plots: {"reward": [[step, reward]], "accuracy": [[steps done, ID, OOD]]}."""
        steps, rewards = self.rewards_curve()
        return {"reward": [[x, r] for x, r in zip(steps, rewards, strict=True)],
                "accuracy": [list(e) for e in self.evals]}

    def state(self) -> dict:
        return {"curve": self.curve, "bucket": self.bucket, "partial": self.partial,
                "eval_before": self.eval_before, "last_eval": self.last_eval, "evals": self.evals}

    def load(self, state: dict, steps_done: int) -> None:
        """Continues a checkpointed run's curve (the summary's other figures are this process's steps)."""
        self.resumed_at = steps_done
        if not state:
            self.curve_start = steps_done
            return
        self.curve, self.bucket, self.partial = list(state["curve"]), int(state["bucket"]), list(state["partial"])
        self.eval_before, self.last_eval = dict(state["eval_before"]), dict(state["last_eval"])
        self.evals = [list(e) for e in state.get("evals", [])]  # (checkpoints written before it was kept: none)


ALONE_REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "results" / "alone_reference.json"
REFERENCE_KEYS = ("task", "steps", "eval_every", "prompts_per_step", "eval_prompts")  # what a reference depends on


def held_out_auc(values: list[float]) -> float:
    """The area under a held-out accuracy curve: the mean of its evaluations after step 0 (evenly spaced)."""
    return sum(values) / len(values) if values else float("nan")


def alone_reference(model: str, settings: dict, path: Path | None = None) -> dict | None:
    """The Alone runs' held-out ID AUC for a zoo model, as bench/experiments/results.py measured it (section 0), if it
    was measured with these settings (REFERENCE_KEYS); else None."""
    try:
        entry = json.loads((path or ALONE_REFERENCE).read_text()).get(model)
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(entry, dict) or any(entry.get("settings", {}).get(k) != settings.get(k) for k in REFERENCE_KEYS):
        return None
    return entry


def accuracy_change(start: dict[str, float], end: dict[str, float], kind: str = "greedy") -> str:
    """'ID (train) 0.234 -> 0.412, OOD (test) 0.012 -> 0.020' (greedy pass@1; start may be empty), with each
    kind of item in brackets where the task has kinds: 'ID (train) 0.234 -> 0.412 (difference 0.000 -> 0.281,
    sum 0.468 -> 0.543)'."""
    names = {"train": "ID (train)", "test": "OOD (test)"}

    def change(key: str) -> str:
        return (f"{start[key]:.3f} -> " if key in start else "") + f"{end.get(key, 0.0):.3f}"

    parts = []
    for split in dict.fromkeys(k.split("/")[0] for k in end):
        kinds = [k for k in end if k.startswith(f"{split}/{kind}.")]
        detail = ", ".join(f"{k.split('.', 1)[1]} {change(k)}" for k in kinds)
        parts.append(f"{names.get(split, split)} {change(f'{split}/{kind}')}" + (f" ({detail})" if detail else ""))
    return ", ".join(parts) + f" ({kind} pass@1)" if parts else "not evaluated"


def reward_windows(head: list[float], tail: list[float], steps: int, window: int) -> tuple[int, float, float]:
    """(n, mean of the first n rewards, mean of the last n) for a run of `steps` whose first and last `window`
    rewards are `head` and `tail`: n = window, or half the run when it is shorter than two windows, so the two
    never overlap (n = 0 below two steps: no comparison)."""
    n = min(window, steps // 2)
    if n == 0:
        return 0, float("nan"), float("nan")
    return n, sum(head[:n]) / n, sum(tail[-n:]) / n


def accuracy_over_time(evals: list[list], points: int = 7) -> str:
    """'step 0 0.215, 25 0.270, ... 150 0.344' (held-out ID greedy pass@1), at most `points` evaluations
    evenly spread, the first and the last always among them; '' without evaluations."""
    known = [(step, acc) for step, acc, _ in evals if acc is not None]
    if not known:
        return ""
    picked = sorted({round(i * (len(known) - 1) / max(points - 1, 1)) for i in range(points)}) \
        if len(known) > points else range(len(known))
    return "step " + ", ".join(f"{known[i][0]} {known[i][1]:.3f}" for i in picked)


def summary(log: RunLog, wall: float, total: int = 0) -> str:
    n, first, last = reward_windows(log.head, list(log.tail), log.steps, log.window)
    rows = [
        ("steps", f"{log.steps}" + (f" (resumed after step {log.resumed_at})" if log.resumed_at else "")),
        ("wall clock", f"{wall:.1f} s"),
        *([(f"reward, first {n} step{'s' if n > 1 else ''}", f"{first:.3f}"),
           (f"reward, last {n} step{'s' if n > 1 else ''}", f"{last:.3f}")] if n else
          [("reward", f"{window_mean(log.head, frac=1.0):.3f}")]),
        ("completion tokens", f"{log.tokens} ({log.tokens / max(log.gen_total, 1e-9):.0f} tok/s generating)"),
        ("median step: generate / learn", f"{statistics.median(log.gen or [0.0]):.3f} s / "
                                          f"{statistics.median(log.learn or [0.0]):.3f} s"),
    ]
    t = log.totals
    if t.published or t.received or t.rejected:
        rejected = ", ".join(f"{k} {v}" for k, v in sorted(t.rejected.items())) or "none"
        rows += [("peers seen", f"at most {t.peers_max} at once, {t.peers_last} at the last step"),
                 ("groups", f"sent {t.published}, received {t.received}, trained on {t.used}, "
                            f"uninformative {t.uninformative}"
                  + (f", duplicates {t.duplicates} (restarted peers' own groups again, not refused)"
                     if t.duplicates else "")),
                 ("given", f"{t.credited} of our groups trained on by other peers (as {t.credited_by} "
                           f"say in their announcements)"),
                 ("records rejected", rejected),
                 *([("streams refused", ", ".join(f"{k} {v}" for k, v in sorted(t.streams_refused.items()))
                     + " (pulls of our bundles turned away at the door: node/swarm/intake.py)")]
                   if t.streams_refused else []),
                 ("senders", f"distrusted for good {t.distrusted} (false log-probs), demoted {t.demoted} "
                             "(groups that pulled against ours)")]
    if log.last_eval:
        rows.append(("held-out accuracy", accuracy_change(log.eval_before, log.last_eval)))
    if len(log.evals) > 1:
        rows.append(("held-out ID over time", accuracy_over_time(log.evals)))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def moving_average(values: list[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_rewards(steps: list[float], rewards: list[float], path: str | Path, title: str, window: int = 20,
                 evals: list[list] | None = None) -> Path:
    """Held-out accuracy at each evaluation (RunLog.evals: ID and OOD greedy pass@1), with the sampled training
    reward (per step, or per bucket of steps on a long run) and its moving average behind it, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, rewards, color="tab:blue", alpha=0.2, lw=1, label="sampled training reward")
    ax.plot(steps, moving_average(rewards, window), color="tab:blue", alpha=0.5, lw=1.5,
            label=f"its moving average ({window})")
    for column, name, color in ((1, "held-out ID accuracy", "tab:green"), (2, "held-out OOD accuracy", "tab:red")):
        points = [(e[0], e[column]) for e in evals or () if e[column] is not None]
        if points:
            ax.plot(*zip(*points, strict=True), "o-", color=color, lw=2.5, label=f"{name} (greedy pass@1)")
    ax.set(xlabel="step", ylabel="accuracy / reward", ylim=(0, 1), title=title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def plot_curves(curves: dict[str, list[list[float]]], path: str | Path, title: str,
                references: dict[str, list[list[float]]] | None = None) -> Path:
    """Several peers' held-out ID accuracy ([step, accuracy] points) on one plot, each beside its reference
    (e.g. the same model trained alone: a dashed line of the same colour) where there is one, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    for i, (name, points) in enumerate(curves.items()):
        color = f"C{i}"
        if points:
            ax.plot(*zip(*points, strict=True), "o-", color=color, lw=2, label=name)
        reference = (references or {}).get(name)
        if reference:
            ax.plot(*zip(*reference, strict=True), "--", color=color, lw=1.2, label=f"{name}: alone")
    ax.set(xlabel="step", ylabel="held-out ID accuracy (greedy pass@1)", ylim=(0, 1), title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)  # (below the
    fig.tight_layout()  #                                                             axes: it covers no curve)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)
