"""``scoretune twin``: the twin of a cluster fitted from its runs (``fit``, exported as a cluster
spec ``sim run`` and ``evaluate`` load), what each mismatch level does, and the twin's studies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer

from agent.cli.render import console
from agent.cli.report import read_where
from agent.errors import AgentError, InputError

twin_app = typer.Typer(help="The twin of your cluster: fit it from measured runs, export it.", no_args_is_help=True)


@twin_app.command("fit")
def fit_command(
    runs: list[Path] = typer.Argument(..., help="Run directories of one cluster and workload (the reference first)."),
    cluster: Path = typer.Option(..., help="The cluster as the API shows it: a cluster spec or `sim import-cluster`'s "
                                 "output (its speeds and pull bandwidths are ignored: the fit finds them)."),
    workload: Path = typer.Option(..., help="The workload the runs replayed (Parquet)."),
    out: Path = typer.Option(..., "--out", "-o", help="The fitted twin, a cluster spec (YAML)."),
    metric: str = typer.Option("mean", help="Latency metric the fit's error is reported in."),
) -> None:
    """Fit the twin's hidden parameters (node speeds, pull bandwidths, function work) to the runs'
    per-node breakdown and write it as a cluster spec `sim run --cluster` and `evaluate --scenario` load."""
    from agent.metrics import METRICS, metric_from_summary, run_timeout_s
    from functions.atomic import write_atomic
    from loadgen.workload import read_workload
    from testbed.cluster import cluster_to_dict, load_cluster
    from testbed.scheduler.config import default_profile, parse_config
    from testbed.sim.backend import suite_specs
    from testbed.sim.twin import Observation, Twin, cluster_view, describe

    if metric not in METRICS:
        raise AgentError(f"--metric {metric!r}: valid: {', '.join(METRICS)}")
    if out.exists() and out.is_dir():
        raise InputError("is a directory (--out names the twin's YAML file)", file=out)
    view = cluster_view(load_cluster(cluster))
    wl = read_workload(workload)
    observations = []
    timeout = 30.0
    for directory in runs:
        summary, where = read_where(directory)
        if summary.get("failed"):
            raise InputError("is a failed run: its numbers are void, leave it out", file=directory / "summary.json")
        unknown = sorted(set(where.get("nodes") or {}) - {n.name for n in view.nodes})
        if unknown:
            raise InputError(f"served requests on node(s) {unknown} that --cluster {cluster} does not have",
                             file=directory / "requests.parquet", field="node")
        record = summary.get("profile")
        profile = default_profile()
        if isinstance(record, dict) and isinstance(record.get("config"), dict):
            profile = parse_config(record["config"], file=directory / "summary.json").profile()
        timeout = run_timeout_s(summary)
        try:
            value = metric_from_summary(summary, metric, timeout)
        except AgentError as err:
            raise InputError(str(err), file=directory / "summary.json") from None
        observations.append(Observation(profile, max(value, 1e-6), where))
    twin = Twin(view, wl, suite_specs(), metric=lambda s: max(metric_from_summary(s, metric, timeout), 1e-6))
    fit = twin.fit(observations, rounds=8)
    lines = describe(fit, view)
    data = cluster_to_dict(fit.params.cluster(view))
    data["name"] = f"{view.name}-twin"
    data["description"] = "twin fitted by `scoretune twin fit` from " + ", ".join(str(r) for r in runs) + ": " + \
        "; ".join(lines)
    import yaml

    write_atomic(out, "# " + "\n# ".join(lines) + "\n" + yaml.safe_dump(data, sort_keys=False))
    for line in lines:
        console.print(line, markup=False, highlight=False)
    console.print(f"wrote {out} (load it with `scoretune sim run --cluster {out}`)")


def _study_args(scenarios: str, levels: str, out: Path) -> tuple[list[str], list[str]]:
    """The scenario and mismatch-level lists of a study command, each checked (one line naming what
    is wrong), and its report directory."""
    from testbed.sim.mismatch import level

    names = [s for s in scenarios.split(",") if s]
    lvls = [x for x in levels.split(",") if x]
    for lvl in lvls:
        level(lvl)
    if not names:
        raise AgentError("--scenarios: no scenario named")
    if out.exists() and not out.is_dir():
        raise AgentError(f"{out}: not a directory (--out names the report directory)")
    return names, lvls


@twin_app.command("mismatch")
def mismatch_command(
    scenarios: str = typer.Option(..., help="Comma-separated scenario names (gensmall-N, gen-N, library names)."),
    levels: str = typer.Option("mild,default,severe", help="Mismatch levels, comma-separated."),
    out: Path = typer.Option(..., "--out", "-o", help="Directory for mismatch.csv and mismatch.md."),
) -> None:
    """Size the mismatch levels by what they do: the rank correlation of the scenario as written
    with its perturbed truth over a fixed set of profiles (docs/twin.md)."""
    from agent.cli.options import argv_tail
    from agent.evaluation.mismatch import level_summary, mismatch_table
    from agent.formatting import md_table
    from functions.atomic import write_atomic

    names, lvls = _study_args(scenarios, levels, out)
    table = mismatch_table(names, lvls)
    summary = level_summary(table)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "mismatch.csv", table.to_csv(index=False, float_format="%.6g"))
    text = md_table(list(summary.columns), summary.itertuples(index=False), number="{:.3f}")
    command = "scoretune twin mismatch " + " ".join(argv_tail("mismatch"))
    write_atomic(out / "mismatch.md", f"Command: `{command}`\n\n{text}\n")
    console.print(text, markup=False, highlight=False)


@twin_app.command("trust")
def trust_command(
    scenarios: str = typer.Option(..., help="Comma-separated scenario names (the validation tasks: never the held-out ones)."),
    levels: str = typer.Option("default,structural,structural-severe", help="Mismatch levels, comma-separated; "
                               "the bounds come from 'default'."),
    steps: int = typer.Option(3, min=1, max=50, help="Runs after the reference per task."),
    out: Path = typer.Option(..., "--out", "-o", help="Directory for trust.csv and trust.md."),
    rescore_only: bool = typer.Option(False, "--rescore", help="Recompute the misses, bounds and summary from "
                                      "OUT/trust.csv (the runs do not depend on how a miss is measured)."),
) -> None:
    """Choose the twin's trust bounds on validation tasks: the 95th percentile of what the twin
    failed to predict (a run's change, a cell's latency) where its engine is the truth's up to
    parameters, and how often they fire where it is not (agent/evaluation/trust.py)."""
    import json

    from agent.cli.options import argv_tail
    from agent.evaluation.trust import bounds, rescore, summary, trust_table
    from agent.formatting import md_table
    from functions.atomic import write_atomic

    names, lvls = _study_args(scenarios, levels, out)
    if "default" not in lvls:
        raise AgentError("--levels: the bounds are chosen at 'default'; name it")
    if rescore_only:
        import pandas as pd

        try:
            table = rescore(pd.read_csv(out / "trust.csv"))
        except (OSError, ValueError, KeyError) as err:
            raise AgentError(f"{out / 'trust.csv'}: cannot rescore it ({type(err).__name__}); run without --rescore") from None
    else:
        table = trust_table(names, lvls, steps)
    bound = bounds(table)
    summ = summary(table, bound)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "trust.csv", table.to_csv(index=False, float_format="%.6g"))
    write_atomic(out / "bounds.json", json.dumps(bound, indent=2, sort_keys=True) + "\n")
    text = md_table(list(summ.columns), summ.itertuples(index=False), number="{:.3f}")
    command = "scoretune twin trust " + " ".join(argv_tail("trust"))
    write_atomic(out / "trust.md", f"Command: `{command}`\n\nBounds (95th percentile at default): change "
                 f"{bound['change']:.3f}, cell {bound['cell']:.3f}\n\n{text}\n")
    console.print(text, markup=False, highlight=False)
    console.print(f"bounds: change {bound['change']:.3f}, cell {bound['cell']:.3f} (wrote {out})")


@twin_app.command("verdicts")
def verdicts_command(
    experiments: list[Path] = typer.Argument(..., help="Twin experiments' directories (scoretune tune --method twin)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Also write the table here (Markdown)."),
) -> None:
    """What the trust rule says of twin experiments already run: each is replayed as a resume replays
    it (the rule off, so the twin proposes what it proposed), and the first run after which the rule
    would have stopped following the twin is named with its reason. A replayed proposal that differs
    from the logged one (the tuner changed since) ends what can be judged: later runs show no
    prediction."""
    from agent.cli.options import argv_tail
    from agent.evaluation.trust import replay_verdicts
    from agent.formatting import md_table
    from functions.atomic import write_atomic

    rows = []
    for d in experiments:
        if not (d / "experiment.jsonl").exists():
            raise AgentError(f"{d}: not a tune experiment (no experiment.jsonl)")
        verdicts = replay_verdicts(d)
        judged = [v for v in verdicts if v["predicted_change"] == v["predicted_change"]]
        first = next((v for v in verdicts if v["refused"]), None)
        rows.append((d.name, len(judged), "-" if first is None else str(first["run"]),
                     "-" if first is None else f"{first['improvement_pct']:+.1f} %",
                     "trusted throughout the judged runs" if first is None else first["reason"]))
    text = md_table(["experiment", "runs judged", "refused after run", "that run's improvement", "why"], rows)
    console.print(text, markup=False, highlight=False)
    if out is not None:
        command = "scoretune twin verdicts " + " ".join(argv_tail("verdicts"))
        write_atomic(out, f"Command: `{command}`\n\n{text}\n")


@twin_app.command("tasks")
def tasks_command(
    family: str = typer.Option("gensmall", help="Generated family: gen, gentrace or gensmall (their gen-N names)."),
    start: int = typer.Option(..., min=0, help="First member's seed (held-out 3000000, validation 4000000: "
                              "seeds no training or earlier validation drew)."),
    count: int = typer.Option(40, min=1, max=10_000, help="Tasks to select."),
    min_headroom: float = typer.Option(10.0, min=0.0, max=100.0, help="Keep a member only if the oracle gets this "
                                       "much (%) below the default weights."),
    scan: int = typer.Option(200, min=1, max=100_000, help="Members scanned at most."),
    runs: int = typer.Option(300, min=10, max=100_000, help="Runs of each member's oracle search (TPE)."),
    jobs: int = typer.Option(2, min=1, max=256, help="Worker processes."),
    out: Path = typer.Option(..., "--out", "-o", help="Directory for headroom.csv and tasks.txt."),
) -> None:
    """Fix a task set by seeds before any method is scored: the first COUNT members from START whose
    default-to-oracle headroom is at least MIN_HEADROOM (the oracle involves no method)."""
    from agent.cli.options import argv_tail
    from agent.compute import Compute
    from agent.evaluation.headroom import measure_headroom
    from functions.atomic import write_atomic
    from testbed.generated import PREFIXES

    prefixes = {p.rstrip("-"): p for p in PREFIXES.values()}
    if family not in prefixes:
        raise AgentError(f"--family {family!r}: valid: {', '.join(sorted(prefixes))}")
    if out.exists() and not out.is_dir():
        raise AgentError(f"{out}: not a directory (--out names the report directory)")
    names = [f"{prefixes[family]}{start + i}" for i in range(scan)]
    frame = measure_headroom({f"{family} from {start}": names}, runs=runs, compute=Compute(jobs=jobs))
    kept = frame[frame["headroom_pct"] >= min_headroom].head(count)
    if len(kept) < count:
        raise AgentError(f"only {len(kept)} of {scan} members reach {min_headroom:g} % headroom; scan more (--scan)")
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "headroom.csv", frame.to_csv(index=False, float_format="%.6g"))
    write_atomic(out / "tasks.txt", ",".join(kept["task"]) + "\n")
    h = kept["headroom_pct"]
    command = "scoretune twin tasks " + " ".join(argv_tail("tasks"))
    text = (f"Command: `{command}`\n\n{len(kept)} tasks (of {int(kept.index.max()) + 1} scanned) with headroom >= "
            f"{min_headroom:g} %: median {h.median():.1f} %, min {h.min():.1f} %, max {h.max():.1f} %; "
            f"every member scanned: median {frame['headroom_pct'].median():.1f} %.\n")
    write_atomic(out / "README.md", text)
    console.print(text, markup=False, highlight=False)


@twin_app.command("time")
def time_command(
    tasks: str = typer.Option("lab:lab-small,lab:lab-taints,lab:lab-packing,gensmall-3000000,gensmall-3000001,"
                              "gensmall-3000002", help="Tasks: lab:CLUSTER (the lab workload) or scenario names."),
    steps: int = typer.Option(10, min=1, max=100, help="Runs after the reference."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Also write the table here (Markdown)."),
) -> None:
    """How long the twin's work between two real runs takes on this machine (one process, one core):
    the refit after a run plus the search for the next proposal, per step of an experiment on the
    simulator (the issue's bound: 20 s)."""
    import time as clock

    from agent.actions import ActionCodec
    from agent.cli.options import argv_tail
    from agent.evaluation.headroom import _objective
    from agent.formatting import md_table
    from agent.objectives.view import objective_view
    from agent.tuners.drive import Measured, drive
    from agent.tuners.factory import make_tuner
    from functions.atomic import write_atomic

    codec = ActionCodec()
    rows = []
    for task in [t for t in tasks.split(",") if t]:
        objective = _objective(task, "mean")
        objective.collect_where = True  # each run's breakdown from the run itself
        tuner = make_tuner("twin", codec, seed=0, view=objective_view(objective))
        marks: list[tuple[float, float]] = []  # (entry, exit) of every measurement

        def measure(step: int, action, objective=objective, marks=marks) -> Measured:  # noqa: ANN001
            entry = clock.perf_counter()
            s = codec.decode(action)
            result = Measured(objective(s), objective.facts(s), objective.where(s))
            marks.append((entry, clock.perf_counter()))
            return result

        drive(tuner, codec, steps, measure)
        # between a run's end and the next run's start: the refit (tell) and the search (suggest)
        between = [marks[k + 1][0] - marks[k][1] for k in range(len(marks) - 1)]
        rows.append((task, len(objective.cluster.nodes), len(objective.workload), float(np.median(between)),
                     float(max(between))))
    text = md_table(["task", "nodes", "requests", "median s between runs", "max s"], rows)
    console.print(text, markup=False, highlight=False)
    if out is not None:
        command = "scoretune twin time " + " ".join(argv_tail("time"))
        write_atomic(out, f"Command: `{command}`\n\n{text}\n")


@twin_app.command("fidelity")
def fidelity_command(
    directory: Path = typer.Argument(..., help="A finished `scoretune fidelity --out` directory (fidelity.json, "
                                     "local/profile-NN)."),
    fit: str = typer.Option("1,5", help="Fit the twin to the first N lab runs, for each N (comma-separated)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Also write the table and the figures here (Markdown, "
                                    "and JSON beside it)."),
) -> None:
    """The twin fitted to a lab's runs against the lab: for each N, the twin fitted to the first N
    runs ranks the profiles it did not see, beside the shipped simulator and the unfitted twin
    (agent.evaluation.twin_fidelity). Reads the runs back; runs nothing on a lab."""
    import json

    from agent.cli.options import argv_tail
    from agent.evaluation.twin_fidelity import markdown, twin_fidelity
    from functions.atomic import write_atomic

    try:
        fits = [int(x) for x in fit.split(",") if x.strip()]
    except ValueError:
        raise AgentError(f"--fit {fit!r}: comma-separated run counts, e.g. 1,5") from None
    result = twin_fidelity(directory, fits)
    text = markdown(result)
    console.print(text, markup=False, highlight=False)
    if out is not None:
        command = "scoretune twin fidelity " + " ".join(argv_tail("fidelity"))
        write_atomic(out, f"Command: `{command}`\n\n{text}")
        write_atomic(out.with_suffix(".json"), json.dumps(result, indent=2, default=str) + "\n")


@twin_app.command("compare")
def compare_command(
    results: Path = typer.Argument(..., help="An evaluation's output directory (results.csv)."),
    method: str = typer.Option("twin", help="The method compared with every other."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Also write the table here (Markdown)."),
    against_dir: Path | None = typer.Option(None, "--against", help="Another evaluation of the same tasks: "
                                            "METHOD there against METHOD here, paired by task (a change of the method)."),
) -> None:
    """METHOD against every other method at T = 1, 2, 3, 5, 10: gap closed minus the other's, paired
    by task with a 95 % interval over tasks, and the share of the other's regret it removes."""
    from agent.cli.options import argv_tail
    from agent.evaluation.compare import by_task, compare
    from agent.evaluation.scoring import score
    from agent.evaluation.tables import read_results
    from agent.formatting import format_ci, md_table
    from functions.atomic import write_atomic

    rows_in = read_results(results)
    scored = score(rows_in.to_dict("records"), int(rows_in["budget"].max()))  # the oracle, as evaluate scored it
    if against_dir is not None:
        from agent.evaluation.compare import against

        other_in = read_results(against_dir)
        other = score(other_in.to_dict("records"), int(other_in["budget"].max()))
        vs = against(scored, other, method)
        text = md_table(["T", "tasks", f"{method} here, gap %", f"{method} in {against_dir.name}, gap %",
                         "difference (pp, 95 % CI over tasks)"],
                        [(r.T, r.tasks, f"{100 * r.gap:.1f}", f"{100 * r.other_gap:.1f}",
                          f"{100 * r.difference:+.1f} [{100 * (r.low if r.low is not None else r.difference):+.1f}, "
                          f"{100 * (r.high if r.high is not None else r.difference):+.1f}]")
                         for r in vs.itertuples(index=False)])
        console.print(text, markup=False, highlight=False)
        if out is not None:
            command = "scoretune twin compare " + " ".join(argv_tail("compare"))
            write_atomic(out, f"Command: `{command}`\n\n{text}\n")
        return
    table = compare(scored, method)
    rows = [(r.other, r.T, r.tasks, f"{100 * r.gap:.0f}", f"{100 * r.other_gap:.0f}",
             f"{100 * r.difference:+.1f} [{100 * r.low:+.1f}, {100 * r.high:+.1f}]", f"{100 * r.regret_cut:+.0f}")
            for r in table.itertuples(index=False)]
    text = md_table(["other", "T", "tasks", f"{method} gap %", "other gap %", "difference (pp, 95 % CI over tasks)",
                     "regret cut %"], rows)
    alone = by_task(scored)
    pct = lambda v: None if v is None else 100.0 * v  # noqa: E731
    each = [(r.method, r.T, r.tasks, format_ci(pct(r.gap), pct(r.gap_low), pct(r.gap_high), signed=False),
             format_ci(r.improvement, r.improvement_low, r.improvement_high, unit=" %"))
            for r in alone.itertuples(index=False)]
    each_text = md_table(["method", "T", "tasks", "gap closed % (95 % CI over tasks)",
                          "improvement at the last T (95 % CI over tasks)"], each)
    console.print(text, markup=False, highlight=False)
    if out is not None:
        command = "scoretune twin compare " + " ".join(argv_tail("compare"))
        write_atomic(out, f"Command: `{command}`\n\n{text}\n\nEach method alone, each task's mean over seeds, "
                     f"intervals over tasks:\n\n{each_text}\n")
