"""``scoretune tune``: options, presets, a resume's config, and the live experiment with its progress."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

import typer

from agent.cli.options import address, dataclass_command, finite, given_options, node_names, opt, same_cluster
from agent.cli.render import console, print_summary, print_where, progress_bar, step_lines
from agent.errors import AgentError
from agent.loop.backends import BackendName
from agent.metrics import Metric
from agent.tuners.factory import METHODS, Method
from testbed.platforms import DEFAULT_PLATFORM, Platform

_RESUME_OPTIONS = {
    "backend": "--backend", "cluster": "--cluster", "workload": "--workload", "policy": "--policy",
    "method": "--method", "steps": "--steps", "metric": "--metric", "repeats": "--repeats", "seed": "--seed",
    "max_reruns": "--max-reruns", "confirm": "--confirm", "confirm_mde": "--confirm-mde", "anchor_every": "--anchor-every", "max_dispatch_lag_p99_s": "--max-dispatch-lag-s",
    "max_late_share": "--max-late-share", "kubeconfig": "--kubeconfig", "context": "--context",
    "namespace": "--namespace", "ingress_url": "--ingress-url", "cold_nodes": "--cold-nodes",
    "remote_workers": "--remote-workers", "master_bind_host": "--master-bind-host", "master_port": "--master-port",
    "workers_wait_s": "--workers-wait-s", "fault_wait_s": "--fault-wait-s", "host_drift": "--host-drift", "max_clock_offset_s": "--max-clock-offset-s",
    "platform": "--platform", "runtime": "--runtime", "host_fit": "--host-fit", "openwhisk_api": "--openwhisk-api", "openwhisk_auth": "--openwhisk-auth",
}
"""Config field (or backend option) -> the ``tune`` option that sets it, for resume errors."""



def _resume_config(stored: Any, resume: Path, given: set[str], values: dict[str, Any]) -> Any:
    """The stored config with what the command line may change applied (more ``--steps``,
    ``--max-reruns``, the kube address); any option that contradicts the stored experiment is an
    error naming the option and both values. Options left out resume the experiment as it was."""
    from agent.loop.backends import KubeOptions
    from agent.loop.config import absolute_if_file, resume_conflicts
    from agent.loop.log import read_log
    from agent.stats import HealthBounds

    def refuse(option: str, was: Any, now: Any) -> typing.NoReturn:
        raise AgentError(f"{option} {now!r} contradicts the experiment in {resume} (run with {was!r}, "
                         f"{resume / 'config.json'}); leave {option} out to resume it as it was")

    if "overwrite" in given and values["overwrite"]:
        raise AgentError("--overwrite and --resume contradict each other: --overwrite deletes the experiment --resume continues")
    if "out" in given and values["out"] is not None and Path(values["out"]).resolve() != resume.resolve():
        refuse("--out", str(resume), str(values["out"]))
    overrides: dict[str, Any] = {}
    if values["embedded_default"]:
        if stored.workload != "lab":
            refuse("--embedded-default (workload lab)", stored.workload, "lab")
        if stored.backend not in ("local", "sim"):
            refuse("--embedded-default (backend local or sim)", stored.backend, "local or sim")
        if "policy" not in given and "method" not in given and stored.method != EMBEDDED_DEFAULT.method:
            refuse("--embedded-default (method twin)", stored.method, EMBEDDED_DEFAULT.method)
    for name in ("backend", "metric", "method", "platform", "runtime", "host_fit"):
        if name in given:
            overrides[name] = str(values[name])
    for name in ("steps", "repeats", "seed", "max_reruns", "fault_wait_s", "host_drift", "confirm_mde", "anchor_every"):
        if name in given:
            overrides[name] = values[name]
    if "confirm" in given and values["confirm"] >= 0:
        overrides["confirm"] = values["confirm"]
    if "workload" in given:
        overrides["workload"] = absolute_if_file(values["workload"])
    if "policy" in given and values["policy"] is not None:
        overrides["policy"] = str(Path(values["policy"]).resolve())
    if "cluster" in given and values["cluster"]:
        cluster = absolute_if_file(values["cluster"])
        if not same_cluster(stored.cluster, cluster):
            refuse("--cluster", stored.cluster, values["cluster"])
    health = stored.health
    if "max_dispatch_lag_s" in given:
        health = dataclasses.replace(health, max_dispatch_lag_p99_s=values["max_dispatch_lag_s"])
    if "max_late_share" in given:
        health = dataclasses.replace(health, max_late_share=values["max_late_share"])
    overrides["health"] = HealthBounds(**dataclasses.asdict(health))
    kube = {k: values[k] for k in ("kubeconfig", "context", "namespace", "ingress_url", "remote_workers",
                                   "master_bind_host", "master_port", "workers_wait_s", "max_clock_offset_s",
                                   "openwhisk_api")
            if k in given}
    if "openwhisk_auth" in given and values["openwhisk_auth"]:
        kube["openwhisk_auth"] = str(Path(values["openwhisk_auth"]).resolve())
    if "cold_nodes" in given:
        kube["cold_nodes"] = node_names(values["cold_nodes"])
    if kube:
        if stored.backend != "kube":
            refuse(_RESUME_OPTIONS[next(iter(kube))], f"backend {stored.backend}", next(iter(kube.values())))
        overrides["backend_options"] = {**dataclasses.asdict(KubeOptions(**stored.backend_options)), **kube}
    try:
        config = dataclasses.replace(stored, **overrides)
    except AgentError as err:
        raise AgentError(as_option(str(err))) from None
    recorded = len(read_log(resume)) - 1
    for name, was, now in resume_conflicts(stored, config, recorded_steps=recorded):
        if name == "health":
            if was.max_dispatch_lag_p99_s != now.max_dispatch_lag_p99_s:
                refuse("--max-dispatch-lag-s", was.max_dispatch_lag_p99_s, now.max_dispatch_lag_p99_s)
            refuse("--max-late-share", was.max_late_share, now.max_late_share)
        if name == "steps":
            raise AgentError(f"--steps {now} is fewer than the {recorded} steps {resume / 'experiment.jsonl'} "
                             "already holds; give at least that many (or leave --steps out)")
        refuse(_RESUME_OPTIONS.get(name, name), was, now)
    return config


@dataclasses.dataclass
class TuneArgs:
    """``scoretune tune`` arguments; each field's ``help`` is its ``--help`` line (as ``train``'s
    :class:`agent.rl.train.Args`). The fields as typed; :func:`tune_config` turns them into an
    :class:`agent.loop.config.ExperimentConfig`."""

    backend: BackendName = opt("Where to run (local: the embedded lab).", "sim")
    platform: Platform = opt("What serves the functions: Knative Serving or OpenWhisk (every backend).",
                             DEFAULT_PLATFORM.value)
    runtime: str = opt("local: how the embedded lab's nodes run pods: process, containers (real images pulled "
                       "from a registry, runc pods, shaped links; root and `make setup-containers`) or auto.", "process")
    host_fit: str = opt("local: a cluster whose nodes need more CPU than this host has beside the harness: scale "
                        "its CPU and request rate by one factor (recorded), refuse it, or off (as declared, "
                        "over-subscribed).", "scale")
    cluster: str = opt("Cluster spec name or path (default: the workload scenario's).", "")
    workload: str = opt("Workload: a Parquet file, 'lab', or a scenario name.", "lab")
    policy: Path | None = opt("Tune with this trained policy (zip; its .json beside it), acting as its config's "
                               "`act` says (mean or sample) unless --method policy|policy-sample.", None)
    method: Method | None = opt("Tune with a method instead of a policy, one of: " + ", ".join(METHODS) + " (with "
                                "--policy, policy-sample draws from the policy's Gaussian).", None, metavar="METHOD")
    steps: int = opt("Runs after the reference (T). With --resume, more steps continue a finished experiment.", 10,
                      min=1, max=10_000)
    out: Path | None = opt("Experiment directory (log, runs, summary, best config).", None, short="-o")
    resume: Path | None = opt("Continue the interrupted experiment in this directory (options left out are the "
                               "stored ones; contradicting ones are refused).", None)
    metric: Metric = opt("Latency metric.", "mean")
    repeats: int = opt("Runs per profile, each paired with a reference run when > 1.", 1, min=1, max=100)
    seed: int = opt("Seed of the workload replay and of the tuner.", 0, min=0, max=2**32 - 1)
    max_reruns: int = opt("Reruns of a void run (unhealthy load generator) before giving up.", 3, min=0, max=100)
    confirm: int = opt("Measured backends: rerun the best profile N times paired with the reference before "
                        "applying it (-1: the preset's, 3 with --embedded-default, else 0).", -1, min=-1, max=100)
    confirm_mde: float = opt("Measured backends: choose the confirmation's pairs from the measured noise (Stein's "
                             "two stages: 6 pairs, then as many as their spread says this improvement in percent "
                             "needs, --confirm at most); 0: exactly --confirm pairs.", 0.0, callback=finite(0.0, 1000.0))
    anchor_every: int = opt("Measured backends: every K steps also run the default profile (an anchor) and tell the "
                            "tuner latencies divided by how far it moved from step 0; 0: no anchors.", 0, min=0, max=10_000)
    max_dispatch_lag_s: float = opt("Void a run whose p99 dispatch lag exceeds this (s).", 0.5,
                                     callback=finite(0.0, 3600.0, low_open=True))
    max_late_share: float = opt("Void a run with a larger share of late dispatches (0..1).", 0.05,
                                 callback=finite(0.0, 1.0))
    overwrite: bool = opt("Delete a previous experiment in --out first.", False)
    embedded_default: bool = opt("make tune: the preset 'embedded-default', the twin tuner on the embedded lab "
                                  "(lab-small, the lab workload), or the simulator if the lab cannot start.", False)
    kubeconfig: str | None = opt("kube: kubeconfig file.", None)
    context: str | None = opt("kube: kubeconfig context.", None)
    namespace: str = opt("kube: namespace of the functions.", "default")
    ingress_url: str | None = opt("kube: Kourier's address, e.g. http://10.0.0.10:31080 (the control plane).", None)
    cold_nodes: str | None = opt("kube: nodes (comma-separated) whose function-image cache is purged before "
                                  "every step; the others hold every image.", None)
    remote_workers: int = opt("kube: Locust workers on the other load generators (ansible/loadgen.yml) the master "
                               "waits for before every run.", 0, min=0, max=1000)
    master_bind_host: str = opt("kube: address the Locust master listens on; with --remote-workers, this host's "
                                 "address on the lab network.", "127.0.0.1")
    master_port: int = opt("kube: the Locust master's port (the workers' locust_loadgen_master_port).", 5557,
                            min=1, max=65535)
    workers_wait_s: float = opt("kube: how long the master waits for every worker before the run is void (s).", 60.0,
                                 callback=finite(1.0, 3600.0))
    max_clock_offset_s: float = opt("kube: a Locust worker whose clock is further than this from the master's (s) "
                                    "voids the run (chrony keeps it under 1 ms on a LAN).", 0.1, callback=finite(0.001, 3600.0))
    openwhisk_api: str | None = opt("kube, --platform openwhisk: OpenWhisk's API, e.g. https://10.0.0.10:31001.",
                                    None)
    openwhisk_auth: str | None = opt("kube, --platform openwhisk: the file with the guest key "
                                     "(.lab/openwhisk/auth.guest).", None)
    fault_wait_s: float = opt("Wait this long after the lab failed to prepare a step (node not Ready, cache purge, "
                               "rollout) before retrying it; --max-reruns bounds the retries.", 30.0,
                               callback=finite(0.0, 3600.0))
    host_drift: float = opt("local: pause the experiment (resumable) when the host's CPU or unpack probe moves "
                            "beyond this ratio of its first run's; 0: never.", 1.5, callback=finite(0.0, 100.0))


@dataclasses.dataclass(frozen=True)
class TunePreset:
    """A named set of values for the :class:`TuneArgs` options a user leaves out (an option typed
    on the command line wins). ``backend`` may be ``auto``: the embedded lab, or the simulator if
    the lab cannot start (:func:`agent.loop.backends.embedded_default_backend`)."""

    name: str
    backend: str
    workload: str
    method: str
    confirm: int

    def apply(self, args: TuneArgs, given: set[str]) -> TuneArgs:
        values = {"backend": self.backend, "workload": self.workload}
        changes: dict[str, Any] = {k: v for k, v in values.items() if k not in given}
        if "policy" not in given and "method" not in given:  # a tuner typed on the command line wins
            changes["method"] = Method(self.method)
        if args.confirm < 0:
            changes["confirm"] = self.confirm
        return dataclasses.replace(args, **changes)


EMBEDDED_DEFAULT = TunePreset("embedded-default", backend="auto", workload="lab", method="twin", confirm=3)
"""``make tune``: the model-based tuner on the embedded lab. It replaced the shipped policy once it
met issue 34's lab targets (docs/results/twin/README.md, "The lab table")."""


def tune_config(args: TuneArgs, given: set[str]) -> Any:
    """A new experiment's :class:`agent.loop.config.ExperimentConfig` from the options (``given``: the
    ones typed on the command line), every contradiction an :class:`AgentError` naming the option."""
    from agent.rl.artefacts import policy_method

    if args.embedded_default:
        args = EMBEDDED_DEFAULT.apply(args, given)
    policy, method = args.policy, args.method
    if policy is not None and method in ("policy", "policy-sample"):
        pass  # the policy, deterministic or sampling
    elif (policy is None) == (not method):
        raise AgentError("give exactly one of --policy FILE or --method NAME")
    if policy is not None and not Path(policy).is_file():
        raise AgentError(f"{policy}: policy file does not exist" if not Path(policy).exists()
                         else f"{policy}: not a file (--policy names a policy zip)")
    if policy is not None and not method:
        method = policy_method(Path(policy))  # the policy's own act mode (mean or sample)
    try:
        return _config(args, method, policy)
    except AgentError as err:
        raise AgentError(as_option(str(err))) from None


def as_option(message: str) -> str:
    """A config error ("host_drift must be ...") as the option that set the field ("--host-drift
    must be ..."): the user typed options, not config fields."""
    name = message.split(" ", 1)[0]
    return _RESUME_OPTIONS[name] + message[len(name):] if name in _RESUME_OPTIONS else message


def _config(args: TuneArgs, method: str | None, policy: Path | None) -> Any:
    """The :class:`agent.loop.config.ExperimentConfig` the options make (its checks raise)."""
    from agent.loop.backends import KubeOptions
    from agent.loop.config import ExperimentConfig
    from agent.stats import HealthBounds

    return ExperimentConfig(
        method=method or "policy", backend=args.backend, cluster=args.cluster, workload=args.workload,
        steps=args.steps, metric=args.metric, repeats=args.repeats, seed=args.seed,
        policy=str(policy) if policy else None, max_reruns=args.max_reruns, confirm=max(args.confirm, 0),
        confirm_mde=args.confirm_mde, anchor_every=args.anchor_every,
        fault_wait_s=args.fault_wait_s, platform=args.platform, runtime=args.runtime,
        host_fit=args.host_fit, host_drift=args.host_drift,
        health=HealthBounds(max_dispatch_lag_p99_s=args.max_dispatch_lag_s, max_late_share=args.max_late_share),
        backend_options=dataclasses.asdict(KubeOptions(
            args.kubeconfig, args.context, args.namespace, args.ingress_url, cold_nodes=node_names(args.cold_nodes),
            remote_workers=args.remote_workers, master_bind_host=address(args.master_bind_host),
            master_port=args.master_port, workers_wait_s=args.workers_wait_s,
            max_clock_offset_s=args.max_clock_offset_s, openwhisk_api=args.openwhisk_api,
            openwhisk_auth=str(Path(args.openwhisk_auth).resolve()) if args.openwhisk_auth else None))
        if args.backend == "kube" else {},
    ).with_absolute_paths()


def _tune(args: TuneArgs, ctx: typer.Context) -> None:
    """``scoretune tune``: the config (new or resumed), then the library builds and runs it
    (:func:`agent.loop.session.open_session`) with the progress shown here."""
    from agent.loop.config import CONFIG_NAME, ExperimentConfig
    from agent.loop.session import open_session

    given = given_options(ctx)
    if args.resume is not None:
        stored = ExperimentConfig.load(args.resume)
        config = _resume_config(stored, args.resume, given, dataclasses.asdict(args))
        out = args.resume
    else:
        if args.out is None:
            raise AgentError("--out DIR is required (or --resume DIR)")
        out = args.out
        if out.exists() and not out.is_dir():
            raise AgentError(f"{out}: not a directory (--out names the experiment directory)")
        if args.overwrite and (out / CONFIG_NAME).exists():
            import shutil

            shutil.rmtree(out)
        config = tune_config(args, given)
    session = open_session(config, out)
    for note in session.notes:
        console.print(f"[bold yellow]note:[/] {note}.")
    _run_experiment(session, resume=args.resume is not None)


def _run_experiment(session: Any, *, resume: bool) -> None:
    """The tuning loop with its progress bar and per-step lines, then the summary table."""
    from agent.loop.report import label_legend

    config, wl, out = session.config, session.workload, session.out
    console.print(f"[bold]scoretune tune[/]: {config.method} on [bold]{config.backend}[/], cluster {config.cluster or '(live)'}, "
                  f"workload {wl.name} ({len(wl)} requests, {wl.duration_s:.0f} s), {config.steps} steps -> {out}")
    console.print("[dim]profiles: " + "\n".join(label_legend(70)) + "[/]")
    progress = progress_bar()
    task = progress.add_task("step 0", total=config.steps + 1)

    def on_start(step: int, setting: Any) -> None:
        most = f"at most {config.confirm}" if config.confirm_mde else str(config.confirm)
        what = f"step {step}" if step <= config.steps else f"confirmation pair {step - config.steps} of {most}"
        progress.update(task, description=what)

    def on_step(record: Any, records: list[Any]) -> None:
        progress.console.print(step_lines(record, records))
        progress.update(task, completed=len(records))

    with progress:
        if resume:
            from agent.loop.log import read_log

            progress.update(task, completed=len(read_log(out)))
        summary = session.run(resume=resume, on_start=on_start, on_step=on_step)
    print_summary(summary, out)
    print_where(out, summary)
    fits = session.fits
    if fits:
        console.print(f"twin: {len(fits)} fits, the last off by {100 * (fits[-1]['metric_error'] or 0):.1f} % on the "
                      f"runs it saw ({out / 'twin-fits.json'})")
        refused = [f for f in fits if f.get("trusted") is False]
        if refused:
            console.print(f"twin: not trusted after {len(refused)} of {len(fits)} runs (model-free proposals "
                          f"then); the last reason: {refused[-1]['reasons'][0]}", markup=False, highlight=False)
        if fits[-1].get("confounded"):
            console.print("twin: not identified by these runs: " + "; ".join(fits[-1]["confounded"][:4])
                          + (" ..." if len(fits[-1]["confounded"]) > 4 else ""), markup=False, highlight=False)


tune_command = dataclass_command(
    TuneArgs, _tune, "Run one live tuning experiment: each step applies a profile, runs the workload, logs the result.",
    context=True,
)


