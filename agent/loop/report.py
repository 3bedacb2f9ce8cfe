"""What a finished experiment reports: ``summary.md``, ``tuning-curve.png``, and compact profile labels."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from agent.actions import WeightSetting
from agent.formatting import format_ci, md_cell
from agent.loop.config import BEST_CONFIG_NAME
from agent.loop.log import StepRecord
from functions.atomic import write_atomic

PLUGIN_ABBREVIATIONS = {
    "TaintToleration": "TT",
    "NodeAffinity": "NA",
    "NodeResourcesFit": "NRF",
    "PodTopologySpread": "PTS",
    "InterPodAffinity": "IPA",
    "NodeResourcesBalancedAllocation": "NRBA",
    "ImageLocality": "IL",
    "VolumeBinding": "VB",
}
"""Short names of the score plugins (their capitals) for labels that must fit an 80-column line."""
STRATEGY_ABBREVIATIONS = {"LeastAllocated": "LA", "MostAllocated": "MA", "RequestedToCapacityRatio": "RTCR"}


def _abbreviation(name: str, table: dict[str, str]) -> str:
    return table.get(name) or "".join(c for c in name if c.isupper()) or name


def compact_label(setting: dict[str, Any] | WeightSetting) -> str:
    """A setting in a few dozen characters, e.g. ``TT=3 NA=2 NRF=1 PTS=2 IPA=2 NRBA=1 IL=off LA``:
    plugin and strategy abbreviations (see :func:`label_legend`), spaces between weights so a
    terminal wraps between them and never inside a name."""
    data = setting.to_dict() if isinstance(setting, WeightSetting) else setting
    parts = [f"{_abbreviation(p, PLUGIN_ABBREVIATIONS)}={'off' if w is None else w}" for p, w in data["weights"].items()]
    strategy = _abbreviation(data["strategy"], STRATEGY_ABBREVIATIONS)
    if data.get("shape"):
        strategy += "[" + ",".join(f"{u}:{v}" for u, v in data["shape"]) + "]"
    return " ".join([*parts, strategy])


def label_legend(width: int = 78) -> list[str]:
    """The abbreviations of :func:`compact_label`, as lines of at most ``width`` characters."""
    from testbed.scheduler.config import SCORE_PLUGINS

    items = [f"{_abbreviation(p, PLUGIN_ABBREVIATIONS)} {p}" for p in SCORE_PLUGINS]
    items += [f"{a} {s}" for s, a in STRATEGY_ABBREVIATIONS.items()]
    lines, line = [], ""
    for item in items:
        candidate = f"{line}, {item}" if line else item
        if len(candidate) > width and line:
            lines.append(line + ",")
            line = item
        else:
            line = candidate
    return [*lines, line] if line else lines


def experiment_summary(config: Any, records: list[StepRecord], best: StepRecord, best_metric: float,
                       applied: StepRecord, confirmation: dict[str, Any] | None, call: str) -> dict[str, Any]:
    """``summary.json`` of a finished experiment: what it was, the reference, the best step (by the
    figure the tuner's rule chose it by), what was applied and why, and where the time went."""
    from agent.loop.anchors import anchors_summary
    from agent.rl.rewards import percent_improvement

    c, ref = config, records[0]
    return {
        "method": c.method, "backend": c.backend, "platform": str(c.platform), "cluster": c.cluster,
        "workload": c.workload, "steps": c.steps, "repeats": c.repeats, "metric": c.metric,
        "reference_metric": ref.metric,
        "best_metric": best_metric,
        "improvement_pct": percent_improvement(ref.metric, best_metric),
        "improvement_ci_pct": [confirmation["ci_low"], confirmation["ci_high"]] if confirmation
        else [best.ci_low, best.ci_high],
        "confirmation": confirmation,
        "verdict": call,
        "best_step": best.step,
        "best_weights": best.setting["weights"],
        "best_strategy": best.setting["strategy"],
        "best_shape": best.setting["shape"],
        "best_label": best.label,
        "applied_step": applied.step,
        "applied_label": applied.label,
        "voided_runs": sum(len(r.voided) for r in records),
        "seconds": time_spent(records, confirmation),
        "metrics": [r.metric for r in records],
        "anchors": anchors_summary(records),
    }


def summary_markdown(summary: dict[str, Any], records: list[StepRecord]) -> str:
    conf = summary.get("confirmation")
    lines = [
        f"# Tuning experiment: {summary['method']} on {summary['backend']}",
        "",
        f"- cluster: `{summary['cluster']}`, workload: `{summary['workload']}`, metric: {summary['metric']} latency",
        f"- reference (default weights): {summary['reference_metric']:.4f} s; best: {summary['best_metric']:.4f} s "
        f"at step {summary['best_step']} ({summary['improvement_pct']:+.2f} %, {summary['verdict']})",
        f"- applied and exported: step {summary['applied_step']} (`{BEST_CONFIG_NAME}`)",
        *([f"- confirmation ({len(conf['samples'])} paired reruns of step {conf['best_step']}): "
           f"{format_ci(conf['improvement_pct'], conf['ci_low'], conf['ci_high'], unit=' %')} -> {conf['verdict']}"] if conf else []),
        *([anchors_line(summary["anchors"])] if summary.get("anchors") else []),
        "",
        "| step | profile | latency (s) | vs reference | 95 % CI | verdict |" + (" drift |" if summary.get("anchors") else ""),
        "|---:|---|---:|---:|---|---|" + ("---:|" if summary.get("anchors") else ""),
    ]
    for r in records:
        ci = "" if r.ci_low is None or r.ci_high is None else f"[{r.ci_low:+.1f}, {r.ci_high:+.1f}]"
        drift = "" if r.drift is None else f" {r.drift:.2f}x{' (anchor)' if r.anchor is not None else ''} |"
        lines.append(f"| {r.step} | `{md_cell(r.label)}` | {r.metric:.4f} | {r.improvement_pct:+.2f} % | {ci} "
                     f"| {md_cell(r.verdict)} |{drift}")
    return "\n".join(lines) + "\n"


def anchors_line(anchors: dict[str, Any]) -> str:
    """What the anchors saw, in one line: how far the reference moved and what the tuner was told."""
    lo, hi = anchors["drift_range"]
    return (f"- anchors ({len(anchors['runs'])} reference runs between the steps): the reference at {lo:.2f}x-{hi:.2f}x "
            "of step 0; the tuner was told each step's latency divided by its drift (column drift), "
            "the vs-reference column too")


def plot_tuning_curve(records: list[StepRecord], path: Path, *, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    steps = [r.step for r in records]
    metrics = [r.metric for r in records]
    best = np.minimum.accumulate(metrics)
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    ax.axhline(records[0].metric, color="grey", linestyle="--", label="reference (default weights)")
    ax.plot(steps, metrics, "o", color="tab:blue", alpha=0.6, label="run")
    ax.step(steps, best, where="post", color="tab:red", label="best so far")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole runs: no tick at 2.5
    ax.set_xlabel("step")
    ax.set_ylabel("latency (s)")
    ax.set_title(title)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    save_figure_atomic(fig, path)
    plt.close(fig)


def save_figure_atomic(fig: Any, path: Path) -> None:
    """``fig.savefig(path)`` through a temp file beside it (no half-written PNG after a kill)."""

    buffer = io.BytesIO()
    fig.savefig(buffer, format=path.suffix.lstrip(".") or "png")
    write_atomic(path, buffer.getvalue())


def time_spent(records: list[StepRecord], confirmation: dict[str, Any] | None) -> dict[str, float]:
    """The experiment's time by phase, over its steps and its confirmation: where the time goes."""
    total: dict[str, float] = {}
    for part in [r.seconds for r in records] + [(confirmation or {}).get("seconds") or {}]:
        for k, v in part.items():
            total[k] = round(total.get(k, 0.0) + float(v), 3)
    return total
