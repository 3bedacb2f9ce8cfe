"""``scoretune testbed up/status/down`` (the embedded lab), ``scoretune fidelity`` and
``scoretune calibrate`` (local against sim)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer

from testbed.errors import InputError
from testbed.local import lab as labmod
from testbed.local.capacity import DEFAULT_RESERVE_MILLI, HostFit
from testbed.local.state import LabState
from testbed.platforms import DEFAULT_PLATFORM, Platform, platform_entry

app = typer.Typer(help="The embedded lab: real node agents, ingress/activator, KPA and scheduler on this machine.", no_args_is_help=True)

_STATE = typer.Option(None, "--state-dir", help="State directory (default: $SCORETUNE_LAB_DIR or a per-user temp dir).")


def _console():
    from rich.console import Console

    return Console()


@app.command("up")
def up_cmd(
    cluster: str = typer.Option(labmod.DEFAULT_CLUSTER, "--cluster", help="Cluster spec: a path or a shipped name."),
    port: int = typer.Option(labmod.DEFAULT_PORT, "--port", help="Ingress port on 127.0.0.1 (0: any free port)."),
    cpu: str = typer.Option("auto", "--cpu", help="CPU enforcement: auto, cgroup-v2, cgroup-v1 or duty-cycle."),
    seed: int = typer.Option(0, "--seed"),
    platform: Platform = typer.Option(DEFAULT_PLATFORM, "--platform", help="What serves the functions: Knative's "
                                      "activator and KPA, or OpenWhisk's controller and invokers (its REST API)."),
    runtime: str = typer.Option("process", "--runtime", help="How nodes run pods: process (local processes, "
                                "pulls are waits), containers (real images from a registry, runc pods, shaped "
                                "links; root and `make setup-containers`), or auto (containers when they work)."),
    hardware: Path | None = typer.Option(None, "--hardware", help="The nodes' hidden hardware (CPU quota, link, "
                                         "noisy neighbour); default: the cluster's shipped file, if any."),
    host_fit: str = typer.Option("scale", "--host-fit", help="A cluster whose nodes need more CPU than this host has "
                                 "beside the harness: scale its CPU and request rate down by one factor (recorded), "
                                 "refuse it, or off (as declared, over-subscribed; recorded)."),
    reserve: int = typer.Option(DEFAULT_RESERVE_MILLI, "--reserve", help="Millicores kept for the harness (Locust, "
                                "controller, agents, registry)."),
    state_dir: Path | None = _STATE,
) -> None:
    """Start one node agent per node, the ingress (Knative's activator or OpenWhisk's controller),
    the autoscaler or invokers, and the scheduler."""
    handle = labmod.up(cluster, state_dir=state_dir, port=port, cpu_enforcement=cpu, seed=seed, platform=platform,
                       runtime=runtime, hardware=hardware, host_fit=host_fit, reserve_milli=reserve)
    c = _console()
    c.print(f"[bold]lab up[/bold] ({handle.platform}): ingress {handle.url} (state in {handle.state_dir})")
    c.print(f"notice: {handle.cpu_mode.notice}")
    lab = LabState(handle.state_dir).read_lab() or {}
    if lab.get("host_fit"):
        c.print(f"host: {HostFit(**{k: v for k, v in lab['host_fit'].items() if k != 'capacity_milli'}).notice}")
    rt = lab.get("runtime", {})
    c.print(f"runtime: {rt.get('kind')} ({rt.get('reason')})" + (f"; hardware from {lab['hardware_file']}" if lab.get("hardware_file") else ""))
    for line in platform_entry(handle.platform).lab_hint(handle.url, LabState(handle.state_dir).guest_key_file):
        c.print(line)

@app.command("status")
def status_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print the raw status as JSON."),
    state_dir: Path | None = _STATE,
) -> None:
    """Show nodes, instances and their placement."""
    st = labmod.status(state_dir)
    if as_json:
        typer.echo(json.dumps(st, indent=2, default=str))
        return
    c = _console()
    if not st.get("running"):
        procs = st.get("processes", [])
        alive = [p for p in procs if p["alive"]]
        c.print(f"no lab running in {st['state_dir']}" + (f" ({len(alive)} leftover process(es); run `testbed down`)" if alive else ""))
        raise typer.Exit(1 if alive else 0)
    from rich.markup import escape
    from rich.table import Table

    c.print(f"[bold]lab {st.get('cluster')}[/bold] ({st.get('platform', 'knative')}) at {st['url']} -- {st['cpu']['notice']}")
    weights = (st.get("profile") or {}).get("weights", {})
    c.print("profile: " + ", ".join(f"{k}={v}" for k, v in weights.items()))
    nodes = Table("node", "ready", "cpu", "memory", "speed", "images", "instances")
    by_node: dict[str, list[str]] = {}
    for inst in st["instances"]:
        by_node.setdefault(inst["node"] or "(pending)", []).append(escape(f"{inst['pod']} [{inst['state']}]"))
    for n in st["nodes"]:
        nodes.add_row(
            n["name"], "yes" if n["ready"] else "[red]NO[/red]", f"{n['cpu_milli']}m", f"{n['memory_bytes'] // 2**20}Mi",
            f"{n['speed']:g}", ", ".join(i.rsplit("/", 1)[-1] for i in n["images"]) or "-", "\n".join(by_node.get(n["name"], [])) or "-",
        )
    c.print(nodes)
    if by_node.get("(pending)"):
        c.print("pending (unschedulable): " + ", ".join(by_node["(pending)"]))
    if st.get("invokers"):
        c.print("invokers: " + ", ".join(f"{k} {v}" for k, v in st["invokers"].items())
                + f"; {st.get('buffered', 0)} activation(s) buffered")
    if st.get("functions"):
        fns = Table("function", "replicas", "ready", "queued", "in flight")
        for f in st["functions"]:
            fns.add_row(f["name"], str(f["replicas"]), str(f["ready"]), str(f["queued"]), str(f["in_flight"]))
        c.print(fns)
    for e in st.get("events", []):
        c.print(f"event: {e}")


@app.command("anatomy")
def anatomy_cmd(
    runtime: str = typer.Option("process,containers", "--runtime", help="Runtimes to measure, comma-separated."),
    repeats: int = typer.Option(5, "--repeats", min=1, max=100, help="Cold starts per function and condition."),
    out: Path = typer.Option(Path("docs/results/containers/anatomy.md"), "--out", "-o", help="Markdown report."),
) -> None:
    """Cold-start anatomy (download, unpack, start, init) per function on each lab runtime, quiet and
    beside a busy neighbour, with the simulator's parts (testbed/local/studies/anatomy.py)."""
    from testbed.local.studies.anatomy import anatomy, markdown

    runtimes = tuple(r for r in runtime.split(",") if r)
    for r in runtimes:
        if r not in ("process", "containers"):
            raise InputError(f"must be process and/or containers, got {r!r}", field="--runtime")
    frame = anatomy(runtimes, repeats=repeats)
    out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out.with_suffix(".csv"), index=False)
    import sys

    tail = sys.argv[sys.argv.index("anatomy") + 1:] if "anatomy" in sys.argv else []
    out.write_text(markdown(frame, " ".join(["scoretune testbed anatomy", *tail])))
    _console().print(out.read_text())


@app.command("probe")
def probe_cmd(
    repeats: int = typer.Option(20, "--repeats", min=1, max=1000, help="Probes to take, back to back."),
    as_json: bool = typer.Option(False, "--json", help="Print every probe as JSON."),
) -> None:
    """Time the host probes (a fixed CPU loop, a fixed unpack) REPEATS times: how much a quiet host
    moves between probes, what an experiment's --host-drift threshold must stay above."""
    import tempfile

    from testbed.local.probe import probe

    with tempfile.TemporaryDirectory(prefix="scoretune-probe-") as d:
        probes = [probe(Path(d)) for _ in range(repeats)]
    if as_json:
        typer.echo(json.dumps(probes, indent=2))
        return
    for key in ("cpu_ms", "unpack_ms"):
        v = sorted(p[key] for p in probes if p[key] is not None)
        if v:
            typer.echo(f"{key}: min {v[0]:.1f}, median {v[len(v) // 2]:.1f}, max {v[-1]:.1f} "
                       f"(max/min {v[-1] / v[0]:.2f}x over {len(v)} probes)")


@app.command("down")
def down_cmd(state_dir: Path | None = _STATE) -> None:
    """Stop everything the lab started (by pid) and remove its cgroups."""
    stopped = labmod.down(state_dir)
    _console().print(
        f"lab down: stopped {stopped['controller']} controller, {stopped['agent']} agent(s), "
        f"{stopped['instance']} instance(s); removed {stopped['cgroups']} cgroup(s)"
        + (f", {stopped['containers']} container(s), {stopped['network']} network object(s)" if "network" in stopped else "")
    )


def _workload(spec: str, duration_s: float, seed: int):
    """``lab`` (the lab recipe of testbed.scenarios) or a Parquet workload file."""
    if spec == "lab":
        from testbed.scenarios import lab_workload

        return lab_workload(seed, duration_s=duration_s)
    from loadgen.workload import read_workload

    return read_workload(spec)


def fidelity_cmd(
    cluster: str = typer.Option("lab-small", "--cluster", help="Cluster spec: a path or a shipped name."),
    workload: str = typer.Option("lab", "--workload", help="A Parquet workload, or 'lab' for the lab recipe."),
    duration: float = typer.Option(30.0, "--duration", help="Seconds of the 'lab' recipe."),
    profiles: int = typer.Option(8, "--profiles", "-k", help="Number of profiles K (the default one plus K-1 random)."),
    calibration: Path | None = typer.Option(None, "--calibration", help="A file from `scoretune calibrate`: also compare the calibrated simulator."),
    out: Path = typer.Option(Path("runs/fidelity"), "--out", "-o", help="Directory for the runs and fidelity.json."),
    seed: int = typer.Option(0, "--seed", help="Seed of the workload recipe, the profiles and the simulator."),
    runtime: str = typer.Option("process", "--runtime", help="How the lab's nodes run pods: process, containers or auto."),
    rounds: int = typer.Option(1, "--rounds", min=1, max=50, help="Run every profile this many times on the lab, "
                               "each round in its own random order on its own arrivals; profiles are ranked by their "
                               "ratio to the same round's default profile (the anchor)."),
    retest: tuple[Path, Path] | None = typer.Option(None, "--retest", help="No lab runs: compare two finished "
                                                    "studies of the same profiles (e.g. sessions hours apart): the "
                                                    "rank correlation of their lab figures and the host probes of each."),
    show: Path | None = typer.Option(None, "--show", help="No lab runs: print a finished study (its table, "
                                     "separation and correlations) from its directory."),
) -> None:
    """Run the same K profiles on `local` and `sim`; print the Spearman rank correlation of their
    mean and p95 latencies (with --retest, of two lab studies; with --show, of a finished one)."""
    if retest is not None:
        _retest(*retest)
        return
    if show is not None:
        from testbed.local.studies.fidelity import read_report, separation

        report = read_report(show)
        report.setdefault("separation", separation(report["rows"]))  # studies written before it was recorded
        _print_study(report, show, "read")
        return
    from testbed.local.backend import LocalBackend
    from testbed.local.studies.fidelity import (
        apply_calibration,
        fidelity,
        fidelity_profiles,
        load_calibration,
    )
    from testbed.sim.backend import SimBackend

    wl = _workload(workload, duration, seed)
    profs = fidelity_profiles(profiles, seed=seed)
    sims = {"sim": SimBackend(cluster, seed=seed)}
    if calibration is not None:
        sims["sim-calibrated"] = SimBackend(cluster, apply_calibration(None, load_calibration(calibration)), seed=seed)
    c = _console()
    with LocalBackend(cluster, seed=seed, runtime=runtime) as local:
        c.print(f"notice: {local.cpu_notice}")
        report = fidelity(local, sims, wl, profs, out, seed=seed, rounds=rounds)
    _print_study(report, out, "written")
    from testbed.local.studies.fidelity import failures

    warning = failures(report, out / "fidelity.json")  # raises when nothing could be ranked
    if warning:
        _console().print(f"[bold yellow]warning:[/] {warning}")


def _print_study(report: dict[str, Any], out: Path, verb: str) -> None:
    from rich.table import Table

    c = _console()
    sims = list(report["rho"])
    t = Table("profile", "local mean", "local p95", "x default", *[f"{lb} {m}" for lb in sims for m in ("mean", "p95")])
    for r in report["rows"]:
        t.add_row(str(r["profile"]), f"{r['local_mean_s']:.4f}", f"{r['local_p95_s']:.4f}", f"{r['local_mean_ratio']:.3f}",
                  *[f"{r[f'{lb}_{m}_s']:.4f}" for lb in sims for m in ("mean", "p95")])
    c.print(t)
    between = [r for r in report["rho_between_rounds"] if r is not None]
    if between:
        c.print(f"the lab against itself: Spearman rho(mean ratio to the anchor) between round 0 and each later round: "
                f"{', '.join(f'{r:.2f}' for r in between)}")
    if report.get("separation"):
        c.print(separation_line(report["separation"]))
    for lb, rho in report["rho"].items():
        mae = report["mean_abs_error_s"][lb]
        c.print(f"{lb}: Spearman rho(mean) = {rho['mean']}, rho(p95) = {rho['p95']}, mean |local - {lb}| of the "
                f"mean latency = {mae} s  ({report['profiles']} profiles, {report['requests']} requests)")
    c.print(f"{verb}: {out / 'fidelity.json'}")


def _retest(first: Path, second: Path) -> None:
    from testbed.local.studies.fidelity import retest

    r = retest(first, second)
    c = _console()
    for side in ("first", "second"):
        x = r[side]
        host = x["host"] or {}
        c.print(f"{side}: {x['directory']}, {x['rounds']} round(s), {' to '.join(x['utc'])} UTC; host probes: cpu "
                f"{host.get('cpu_ms')} ms, unpack {host.get('unpack_ms')} ms; code {x['git_revision'] or 'not recorded'}")
        if x["separation"]:
            c.print(f"  {separation_line(x['separation'])}")
    def rho(v: float | None) -> str:
        return "n/a (ties)" if v is None else f"{v:.2f}"

    c.print(f"{r['cluster']}, {r['profiles']} profiles: test-retest Spearman rho = {rho(r['rho']['mean'])} (mean latency, "
            f"ratio to the round's default), {rho(r['rho']['p95'])} (p95)"
            + f"; Pearson of the log figures {rho(r['pearson_log'])}"
            + (f", where a lab that did not move would give about {r['expected']:.2f}" if r["expected"] is not None else ""))


def separation_line(sep: dict[str, Any]) -> str:
    """One line of :func:`testbed.local.studies.fidelity.separation` for a user."""
    more = (f"{sep['rounds_for_0_9']} rounds would reach 0.9" if sep["rounds_for_0_9"] is not None
            else "no spread beyond the noise")
    return (f"separation: profiles spread {sep['profile_sd']:.3f} in log latency against a run noise of "
            f"{sep['run_sd']:.3f} (ratio {sep['ratio']:.2f}); the ranking's reliability over {sep['rounds']} "
            f"rounds {sep['reliability']:.2f} ({more})")


def calibrate_cmd(
    cluster: str = typer.Option("lab-small", "--cluster", help="Cluster spec: a path or a shipped name."),
    workload: str = typer.Option("lab", "--workload", help="A Parquet workload, or 'lab' for the lab recipe."),
    duration: float = typer.Option(30.0, "--duration", help="Seconds of the 'lab' recipe."),
    profiles: int = typer.Option(2, "--profiles", "-k", help="Measure under this many profiles (default + random)."),
    out: Path = typer.Option(Path("runs/calibration/lab-small.yaml"), "--out", "-o", help="Calibration file to write."),
    runs: Path = typer.Option(Path("runs/calibration/runs"), "--runs", help="Directory for the measurement runs."),
    seed: int = typer.Option(1, "--seed", help="Seed of the workload recipe (differs from fidelity's default 0)."),
    noise: bool = typer.Option(False, "--noise", metavar="", help="Measure the lab's run-to-run noise instead: the "
                               "lab workload under the default profile, --repeats times per (length, load) cell, "
                               "and fit cv = c0 (N/N0)^a (d/d0)^b (testbed/noise_model.py); -o defaults to "
                               "runs/calibration/noise.yaml."),
    durations: str = typer.Option("10,20,40", "--durations", help="--noise: workload lengths (s), comma-separated, "
                                  "each at the lab's rate."),
    rates: str = typer.Option("3,12", "--rates", help="--noise: loads (requests/s), comma-separated, each at the "
                              "middle length."),
    repeats: int = typer.Option(4, "--repeats", min=2, max=100, help="--noise: runs per cell."),
    refit: Path | None = typer.Option(None, "--refit", help="--noise: fit the model again from the cells measured in "
                                      "this calibration file (no lab runs) and write it to -o."),
    beside_hog: int = typer.Option(0, "--beside-hog", min=0, max=64, help="--noise: measure beside this many "
                                   "CPU-spinning processes (a co-located job), to tell contention from the lab's "
                                   "own spread."),
) -> None:
    """Fit the simulator's timing parameters (work per request, cold-start parts) from lab runs;
    with --noise, measure how much one profile's latency moves between repeated lab runs."""
    if refit is not None and not noise:
        raise InputError("--refit refits a noise calibration: add --noise", field="--refit")
    if noise:
        _calibrate_noise(cluster, out, runs, seed, durations, rates, repeats, refit, beside_hog)
        return
    from testbed.local.backend import LocalBackend
    from testbed.local.studies.fidelity import calibrate, fidelity_profiles, write_calibration

    wl = _workload(workload, duration, seed)
    profs = fidelity_profiles(max(2, profiles), seed=seed)[: max(1, profiles)]
    c = _console()
    with LocalBackend(cluster, seed=seed) as local:
        c.print(f"notice: {local.cpu_notice}")
        fitted, _ = calibrate(local, wl, runs, profiles=profs, seed=seed)
    info = {"cluster": cluster, "workload": wl.name, "requests": len(wl), "profiles": len(profs), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_calibration(out, fitted, info=info)
    from rich.table import Table

    t = Table("function", "work_cpu_s mean", "work_io_s (fixed path)", "start_s", "init_s", "warm samples", "cold samples")
    for fn, f in fitted.items():
        t.add_row(fn, f"{f.get('work_cpu_s_mean', float('nan')):.4f}", f"{f.get('work_io_s', float('nan')):.4f}",
                  f"{f.get('start_s', float('nan')):.3f}",
                  f"{f.get('init_s', float('nan')):.3f}", str(f["warm_samples"]), str(f["cold_samples"]))
    c.print(t)
    c.print(f"written: {out}")


def _numbers(text: str, option: str, high: float) -> list[float]:
    """``10,20,40`` as positive numbers (``option`` names the flag in the error)."""
    out = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise InputError(f"{part.strip()!r} is not a number", field=option) from None
        if not (0 < value <= high):
            raise InputError(f"{value:g} is outside (0, {high:g}]", field=option)
        out.append(value)
    if len(set(out)) != len(out):
        raise InputError(f"a value is given twice in {text!r}", field=option)
    return out


def _calibrate_noise(cluster: str, out: Path, runs: Path, seed: int, durations: str, rates: str,
                     repeats: int, refit: Path | None, beside_hog: int = 0) -> None:
    from testbed.local.backend import LocalBackend
    from testbed.local.studies.noise import cpu_hog, measure_noise, noise_cells
    from testbed.noise_model import read_noise_cells, write_noise
    from testbed.scenarios import LAB_RATE_PER_S

    c = _console()
    if refit is not None:
        measured, info = read_noise_cells(refit)
        if out == Path("runs/calibration/lab-small.yaml"):
            out = refit
        info["refit"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_noise(out, measured, info)
        _print_noise(c, measured)
        c.print(f"written: {out}")
        return

    lengths = sorted(_numbers(durations, "--durations", 3600.0))
    loads = sorted(_numbers(rates, "--rates", 1000.0))
    middle = lengths[len(lengths) // 2]
    cells = noise_cells(lengths, loads, LAB_RATE_PER_S, middle)
    if out == Path("runs/calibration/lab-small.yaml"):
        out = Path("runs/calibration/noise.yaml")
    total = sum(d for d, _ in cells) * repeats
    c.print(f"noise: {len(cells)} cells x {repeats} repeats, {total:.0f} s of workload (plus a reset per run)")

    def progress(d: float, r: float, k: int, mean_s: float, wall_s: float) -> None:
        c.print(f"  {d:g} s at {r:g}/s, repeat {k + 1}/{repeats}: mean {mean_s:.4f} s ({wall_s:.0f} s)")

    with LocalBackend(cluster, seed=seed) as local, cpu_hog(beside_hog):
        c.print(f"notice: {local.cpu_notice}" + (f"; beside {beside_hog} CPU-spinning process(es)" if beside_hog else ""))
        measured = measure_noise(local, cells, repeats, runs, seed=seed, progress=progress)
    info = {"cluster": cluster, "workload": "lab (testbed.scenarios.lab_workload)", "seed": seed,
            "repeats": repeats, "profile": "default", "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "beside_hog": beside_hog,
            "command": f"scoretune calibrate --noise --cluster {cluster} --durations {durations} --rates {rates} "
                       f"--repeats {repeats} --seed {seed}" + (f" --beside-hog {beside_hog}" if beside_hog else "")}
    write_noise(out, measured, info)
    _print_noise(c, measured)
    c.print(f"written: {out}")


def _print_noise(c, measured) -> None:
    from rich.table import Table

    from testbed.noise_model import fit_noise

    for metric, cs in measured.items():
        model = fit_noise(cs, metric)
        t = Table("length (s)", "load (/s)", "requests", "cv", "model cv", title=f"{metric}: cv = "
                  f"{model.c0:.4f} (N/{model.n0:.0f})^{model.n_exp:.2f} (d/{model.d0:.0f})^{model.d_exp:.2f}, "
                  f"N in [{model.n_range[0]:g}, {model.n_range[1]:g}], d in [{model.d_range[0]:g}, {model.d_range[1]:g}]")
        for cell in cs:
            t.add_row(f"{cell.duration_s:g}", f"{cell.rate_per_s:g}", f"{cell.requests:g}", f"{cell.cv:.4f}",
                      f"{model.cv(cell.requests, cell.duration_s):.4f}")
        c.print(t)


def bench_lab_cmd(
    requests_n: int = typer.Option(200, "--requests", help="Sequential requests per path."),
    runtime: str = typer.Option("process", "--runtime", help="The lab's runtime: process or containers."),
    starts: int = typer.Option(10, "--starts", help="Warm-image instance starts to time (no pull)."),
    load_s: float = typer.Option(15.0, "--load-seconds", help="Seconds of the lab workload replayed for the lab's CPU."),
) -> None:
    """Measure the lab's own costs and print JSON (testbed.local.studies.overhead): start-up of a
    one-node lab, one cold start, the ingress/activator's added latency, an instance start with
    its image cached, and the lab's own CPU per request under the lab workload."""
    if runtime not in ("process", "containers"):
        raise typer.BadParameter(f"must be process or containers, got {runtime!r}", param_hint="--runtime")
    from testbed.local.studies.overhead import measure_overhead

    typer.echo(json.dumps(measure_overhead(runtime, requests_n=requests_n, starts=starts, load_s=load_s)))
