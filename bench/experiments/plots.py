"""The results page's plots: held-out accuracy curves of the pairs, the mixes and the mixed-tokenizer swarms."""
from __future__ import annotations

import statistics
from pathlib import Path

from bench.experiments.grid import PAIR_ABOUT, TOKENIZER_OF
from bench.experiments.runs import alone_runs, peer_runs, ran_pairs


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
