"""Plots people would rather see than read (matplotlib, headless)."""
from __future__ import annotations

from pathlib import Path


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
