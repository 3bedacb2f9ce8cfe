"""``scoretune confirm`` (a saved profile re-confirmed in a later session) and ``scoretune
calibrate --aa`` (the confirmation protocol's false-confirmation rate and noise, measured)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import typer

from agent.cli.render import console, design_line
from agent.errors import AgentError


def _fmt(x: float | None, unit: str = " %") -> str:
    """A signed percentage (an effect), or with ``unit=" pct"`` an unsigned one (a spread)."""
    if x is None:
        return "n/a"
    return f"{x:+.1f} %" if unit == " %" else f"{x:.1f} %"


def confirm_cmd(
    experiment: Path = typer.Argument(..., help="A finished experiment's directory (`tune --out`)."),
    pairs: int = typer.Option(24, "--pairs", min=2, max=100, help="Randomized interleaved reference/profile pairs "
                              "(with --mde, at most this many)."),
    mde: float = typer.Option(15.0, "--mde", help="Choose the pairs from the measured noise (Stein's two stages: 6 "
                              "pairs, then as many as an improvement of this many percent needs); 0: exactly --pairs."),
    seed: int | None = typer.Option(None, "--seed", min=0, help="Seed of the pairs' arrival draws and orders "
                                    "(default: the experiment's seed + 5000, unlike its own confirmation's)."),
) -> None:
    """Re-confirm the profile a finished experiment chose, in this session, against the reference:
    randomized interleaved pairs on the experiment's backend, cluster and workload, judged by a paired
    interval with its minimum detectable effect; written to EXPERIMENT/reconfirmations/<time>/."""
    from agent.loop.verify import reconfirm

    if not experiment.is_dir():
        raise AgentError(f"{experiment}: not an experiment directory")
    r = reconfirm(experiment, pairs, seed=seed, mde_target=_mde(mde))
    c = console
    c.print(f"{r['label']}: {r['improvement_pct']:+.1f} % [{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}] over "
            f"{r['pairs']} pairs -> {r['verdict']} (minimum detectable effect {_fmt(r['mde_pct'], ' pct')}; "
            f"first verdict: {r['first_verdict']}; voids {r['voids_by_arm']})")
    if r["design"]["kind"] == "two-stage":
        c.print(design_line(r["design"]))


def _mde(value: float) -> float | None:
    """``--mde``: a finite percentage in [0, 1000], 0 meaning a fixed number of pairs."""
    import math

    if not math.isfinite(value) or not 0.0 <= value <= 1000.0:
        raise AgentError(f"--mde must be a percentage in [0, 1000] (0: exactly --pairs pairs), got {value}")
    return value or None


AA_PARAMS = [
    inspect.Parameter("aa", inspect.Parameter.KEYWORD_ONLY, annotation=bool, default=typer.Option(
        False, "--aa", help="Measure the confirmation protocol itself: --confirmations A/A confirmations (the "
        "reference against itself, --pairs randomized pairs each) of --workload on --cluster; prints and writes "
        "(-o, default runs/calibration/aa/) the false-confirmation rate, the paired noise and the minimum "
        "detectable effect.")),
    inspect.Parameter("confirmations", inspect.Parameter.KEYWORD_ONLY, annotation=int, default=typer.Option(
        6, "--confirmations", min=1, max=200, help="--aa: how many A/A confirmations.")),
    inspect.Parameter("pairs", inspect.Parameter.KEYWORD_ONLY, annotation=int, default=typer.Option(
        8, "--pairs", min=2, max=100, help="--aa: pairs per confirmation.")),
    inspect.Parameter("mde", inspect.Parameter.KEYWORD_ONLY, annotation=float, default=typer.Option(
        0.0, "--mde", help="--aa: each confirmation as Stein's two-stage design for this improvement in percent "
        "(--pairs at most), to measure that design's error rate; 0: exactly --pairs pairs.")),
    inspect.Parameter("report", inspect.Parameter.KEYWORD_ONLY, annotation=Path | None, default=typer.Option(
        None, "--report", help="--aa: no lab runs: pool every A/A calibration under this folder per cluster, print "
        "the table and write DIR/aa-pooled.json.")),
    inspect.Parameter("host_fit", inspect.Parameter.KEYWORD_ONLY, annotation=str, default=typer.Option(
        "scale", "--host-fit", help="--aa: a cluster bigger than the host: scale, refuse or off (as declared).")),
    inspect.Parameter("lab_runtime", inspect.Parameter.KEYWORD_ONLY, annotation=str, default=typer.Option(
        "process", "--runtime", help="--aa: the lab's runtime: process, containers or auto.")),
]


def with_aa(calibrate: Any) -> Any:
    """``calibrate`` (testbed's command) with the ``--aa`` options added: the A/A calibration runs
    the agent's confirmation protocol, which the testbed below it cannot import."""
    sig = inspect.signature(calibrate, eval_str=True)

    def command(**kwargs: Any) -> None:
        aa = {p.name: kwargs.pop(p.name) for p in AA_PARAMS}
        if not aa["aa"]:
            calibrate(**kwargs)
            return
        _aa(kwargs, aa)

    command.__signature__ = sig.replace(parameters=[*sig.parameters.values(), *AA_PARAMS])  # type: ignore[attr-defined]
    command.__doc__ = (calibrate.__doc__ or "") + " With --aa, measure the confirmation protocol's error rate and power."
    command.__name__ = "calibrate"
    return command


def _aa_report(root: Path) -> None:
    import json

    from agent.formatting import md_table
    from agent.loop.verify import pool_aa
    from functions.atomic import write_atomic

    pooled = pool_aa(root)
    write_atomic(root / "aa-pooled.json", json.dumps(pooled, indent=2, sort_keys=True) + "\n")
    rows = [[c, str(r["confirmations"]), str(r["pairs"]), f"{r['false_improvements']} ({r['false_improvements_shipped']})",
             str(r["false_regressions"]), _fmt(r["paired_sd_pct"], " pct"), _fmt(r["mde_pct"], " pct"),
             str(r["pairs_for_mde_15"]), f"{r['same_seed_cv_median']:.3f}", f"{r['reference_cv_within_confirmation_median']:.3f}",
             f"{r['first_run_over_partner_median']:.3f}", f"{r['voids']}/{r['runs_attempted']}"]
            for c, r in pooled["clusters"].items()]
    typer.echo(md_table(["cluster", "A/A", "pairs", "false improvements (shipped)", "false regressions",
                                  "paired sd", "MDE", "pairs for 15 %", "same-seed CV", "reference CV",
                                  "first run / partner", "voids"], rows))
    for c, r in pooled["clusters"].items():
        ses = r["session"]
        typer.echo(f"{c}: runs {' to '.join(ses['utc'] or ['?'])} UTC; host probes: cpu {ses['cpu_probe_ms']} ms, "
                   f"unpack {ses['unpack_probe_ms']} ms, {ses['drift_from_up']} x the lab's up probe")
    typer.echo(f"order: over {pooled['pairs']} pairs the run that went first measured "
               f"{pooled['pairs_first_over_second_median']:.3f}x the second (median) and was the slower in "
               f"{pooled['pairs_first_slower']}")
    console.print(f"written: {root / 'aa-pooled.json'}")


def _aa(kwargs: dict[str, Any], aa: dict[str, Any]) -> None:
    from agent.loop.config import ExperimentConfig
    from agent.loop.verify import aa_calibration

    if aa["report"] is not None:
        _aa_report(Path(aa["report"]))
        return
    mde_target = _mde(aa["mde"])

    out = kwargs["out"]
    out = Path("runs/calibration/aa") if str(out) == "runs/calibration/lab-small.yaml" else Path(out)
    if out.exists() and any(out.iterdir()):
        raise AgentError(f"{out}: already holds a calibration; pick another -o")
    workload = kwargs["workload"]
    if workload == "lab":  # the lab recipe at --duration, as calibrate's other modes take it
        from loadgen.workload import write_workload
        from testbed.scenarios import lab_workload

        out.mkdir(parents=True, exist_ok=True)
        workload = str(write_workload(lab_workload(kwargs["seed"], duration_s=kwargs["duration"]), out / "workload.parquet"))
    config = ExperimentConfig(method="default", backend="local", cluster=kwargs["cluster"], workload=workload,
                              steps=1, seed=kwargs["seed"], runtime=aa["lab_runtime"],
                              host_fit=aa["host_fit"])
    c = console

    def progress(i: int, r: dict[str, Any]) -> None:
        c.print(f"A/A {i + 1}/{aa['confirmations']}: {r['improvement_pct']:+.1f} % [{_fmt(r['ci_low'])}, "
                f"{_fmt(r['ci_high'])}] -> {r['verdict']} (shipped: {r['shipped_verdict']}; sd {_fmt(r['sd_pct'], ' pct')}, "
                f"voids {r['voids_by_arm']}, {r['pairs']} pairs)")

    s = aa_calibration(config, out, aa["confirmations"], aa["pairs"], progress=progress, mde_target=mde_target)
    c.print(f"{s['confirmations']} A/A confirmations of {s['pairs']} pairs on {s['cluster']} ({s['runtime']}): "
            f"false improvements {s['false_improvements']} (shipped protocol {s['false_improvements_shipped']}), "
            f"false regressions {s['false_regressions']}; paired sd {_fmt(s['paired_sd_pct'], ' pct')}, minimum detectable "
            f"effect {_fmt(s['mde_pct'], ' pct')} at {s['pairs']} pairs; a 15 % effect needs {s['pairs_for_mde_15']} pairs; "
            f"void rate {s['void_rate']}")
    c.print(f"written: {out / 'aa.json'}")


__all__ = ["confirm_cmd", "with_aa"]
