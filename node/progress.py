"""Progress display for long runs and the final summary (pure formatting plus one writer)."""
from __future__ import annotations

import statistics
import sys
import time


def window_mean(values: list[float], frac: float = 0.1, head: bool = True) -> float:
    """Mean of the first (head) or last frac of values (at least one value)."""
    if not values:
        return 0.0
    k = max(1, int(len(values) * frac))
    part = values[:k] if head else values[-k:]
    return sum(part) / len(part)


def format_step(result, total: int, elapsed: float, recent: list[float]) -> str:
    avg = sum(recent) / len(recent) if recent else 0.0
    m = result.metrics
    return (f"step {result.step + 1:>4}/{total}  reward {result.reward:.3f} (avg{len(recent):>3} {avg:.3f})  "
            f"G {result.group_size:>2} strag {m.get('straggler_rate', 0.0):.2f} lam {m.get('lambda', 0.0):.2f}  |grad| {m.get('grad_norm', 0.0):.3f}  w {m.get('mean_weight', 1.0):.3f}  "
            f"gen {result.gen_seconds:.2f}s learn {result.learn_seconds:.2f}s  {elapsed:.0f}s")


class Progress:
    """One rewritten line on a terminal; a plain line every `every` steps otherwise (logs, CI)."""

    def __init__(self, total: int, stream=None, every: int = 10, window: int = 20):
        self.total, self.every, self.window = total, every, window
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.start = time.monotonic()
        self.rewards: list[float] = []

    def update(self, result) -> None:
        self.rewards.append(result.reward)
        line = format_step(result, self.total, time.monotonic() - self.start, self.rewards[-self.window:])
        if self.tty:
            self.stream.write("\r" + line + "\x1b[K")
            if result.step + 1 == self.total:
                self.stream.write("\n")
        elif (result.step + 1) % self.every == 0 or result.step + 1 == self.total:
            self.stream.write(line + "\n")
        self.stream.flush()


def summary(results: list, wall: float) -> str:
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
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)
