"""What a run shows: a progress display for long runs, the final summary, and reward plots (matplotlib,
headless)."""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from .metrics import StepResult


def window_mean(values: list[float], frac: float = 0.1, head: bool = True) -> float:
    """Mean of the first (head) or last frac of values (at least one value)."""
    if not values:
        return 0.0
    k = max(1, int(len(values) * frac))
    part = values[:k] if head else values[-k:]
    return sum(part) / len(part)


def format_step(result: StepResult, total: int, elapsed: float, recent: list[float]) -> str:
    avg = sum(recent) / len(recent) if recent else 0.0
    return (f"step {result.step + 1:>4}/{total}  reward {result.reward:.3f} (avg{len(recent):>3} {avg:.3f})  "
            f"G {result.group_size:>2} strag {result.group.straggler_rate:.2f} lam {result.group.lam:.2f}  "
            f"|grad| {result.loss.grad_norm:.3f}  w {result.loss.mean_weight:.3f}  "
            f"gen {result.gen_seconds:.2f}s learn {result.learn_seconds:.2f}s  {elapsed:.0f}s")


class Progress:
    """One rewritten line on a terminal; a plain line every `every` steps otherwise (logs, CI)."""

    def __init__(self, total: int, stream=None, every: int = 10, window: int = 20):
        self.total, self.every, self.window = total, every, window
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.start = time.monotonic()
        self.rewards: list[float] = []

    def update(self, result: StepResult) -> None:
        self.rewards.append(result.reward)
        line = format_step(result, self.total, time.monotonic() - self.start, self.rewards[-self.window:])
        if self.tty:
            self.stream.write("\r" + line + "\x1b[K")
            if result.step + 1 == self.total:
                self.stream.write("\n")
        elif (result.step + 1) % self.every == 0 or result.step + 1 == self.total:
            self.stream.write(line + "\n")
        self.stream.flush()


def accuracy_change(start: dict[str, float], end: dict[str, float], kind: str = "greedy") -> str:
    """'ID (train) 0.234 -> 0.412, OOD (test) 0.012 -> 0.020' (greedy pass@1; start may be empty)."""
    names = {"train": "ID (train)", "test": "OOD (test)"}
    parts = []
    for split in dict.fromkeys(k.split("/")[0] for k in end):
        key = f"{split}/{kind}"
        before = f"{start[key]:.3f} -> " if key in start else ""
        parts.append(f"{names.get(split, split)} {before}{end.get(key, 0.0):.3f}")
    return ", ".join(parts) + f" ({kind} pass@1)" if parts else "not evaluated"


def summary(results: list[StepResult], wall: float) -> str:
    rewards = [r.reward for r in results]
    tokens = sum(r.tokens for r in results)
    gen = [r.gen_seconds for r in results] or [0.0]
    learn = [r.learn_seconds for r in results] or [0.0]
    rows = [
        ("steps", f"{len(results)}"),
        ("wall clock", f"{wall:.1f} s"),
        ("reward, first 10% of steps", f"{window_mean(rewards, head=True):.3f}"),
        ("reward, last 10% of steps", f"{window_mean(rewards, head=False):.3f}"),
        ("completion tokens", f"{tokens} ({tokens / max(sum(gen), 1e-9):.0f} tok/s generating)"),
        ("median step: generate / learn", f"{statistics.median(gen):.3f} s / {statistics.median(learn):.3f} s"),
    ]
    evaluated = [r.eval for r in results if r.eval]
    if evaluated:
        rows.append(("held-out accuracy", accuracy_change(results[0].eval_before, evaluated[-1])))
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


def plot_rewards(rewards: list[float], path: str | Path, title: str, window: int = 20) -> Path:
    """Sampled reward per step and its moving average, saved as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    steps = list(range(1, len(rewards) + 1))
    ax.plot(steps, rewards, color="tab:blue", alpha=0.3, lw=1, label="sampled reward")
    ax.plot(steps, moving_average(rewards, window), color="tab:blue", lw=2, label=f"moving average ({window})")
    ax.set(xlabel="step", ylabel="mean reward of own completions", ylim=(0, 1), title=title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def plot_curves(curves: dict[str, list[float]], path: str | Path, title: str, window: int = 10) -> Path:
    """Several runs' sampled reward (moving average) on one plot, saved as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, rewards in curves.items():
        ax.plot(range(1, len(rewards) + 1), moving_average(rewards, window), lw=2, label=name)
    ax.set(xlabel="step", ylabel=f"sampled reward (moving average {window})", ylim=(0, 1), title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)
