"""Sweep plot: latency percentiles and throughput against concurrency (matplotlib, Agg)."""

from __future__ import annotations


def plot_sweep(runs: list[dict], path: str, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r["max_concurrency"] or r["num_prompts"] for r in runs]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
        for p, style in (("p50", "-o"), ("p90", "--s"), ("p99", ":^")):
            ax = axes[0] if key == "ttft_ms" else axes[1]
            ax.plot(xs, [r[key][p] for r in runs], style, label=f"{label} {p}")
    for ax, name in ((axes[0], "TTFT (ms)"), (axes[1], "TPOT (ms)")):
        ax.set_ylabel(name)
    ax2 = axes[2]
    ax2.plot(xs, [r["output_throughput"] for r in runs], "-o", label="output tokens/s")
    ax2.set_ylabel("output tokens/s")
    twin = ax2.twinx()
    twin.plot(xs, [r["request_throughput"] for r in runs], "--s", color="tab:orange",
              label="requests/s")
    twin.set_ylabel("requests/s")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_xlabel("max concurrency")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8)
    ax2.legend(loc="upper left", fontsize=8)
    twin.legend(loc="lower right", fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
