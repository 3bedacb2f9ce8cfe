"""``scoretune kube ...``: render the real lab's objects, and drive its scheduler from the shell.

``render`` is what the Ansible roles call (ansible/roles/scoretune_render): it writes every
Kubernetes object of the lab from scoretune's own records and prints a one-line JSON summary
(``{"changed": ..., "written": [...], "unchanged": [...]}``) so Ansible reports "changed" only
when a file's text changed.
"""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from testbed.errors import ConfigError, TestbedError

log = logging.getLogger(__name__)

app = typer.Typer(help="The real Kubernetes lab: render its objects, apply a scheduler configuration.",
                  no_args_is_help=True)


def _profile(config: Path | None, profile_name: str | None, weights: str, strategy: str | None):
    """The profile to ship: from a KubeSchedulerConfiguration file, else from compact weights."""
    from testbed.scheduler.config import (
        DEFAULT_SCHEDULER_NAME,
        load_config,
        parse_weights,
        profile_from_weights,
    )

    if config is None:
        return profile_from_weights(parse_weights(weights) if weights else {}, strategy=strategy)
    if weights or strategy:
        raise ConfigError("give either --config or --weights/--strategy, not both", field="--config")
    cfg = load_config(config)
    if profile_name is not None:
        return cfg.profile(profile_name)
    others = [p for p in cfg.profiles if p.scheduler_name != DEFAULT_SCHEDULER_NAME]
    if len(others) > 1:
        names = ", ".join(p.scheduler_name for p in others)
        raise ConfigError(f"several profiles ({names}); choose one with --profile", file=config, field="profiles")
    return others[0] if others else cfg.profiles[0]


def _specs(functions: str):
    from functions.errors import InputError
    from functions.spec import discover_specs

    specs = discover_specs()
    if not functions:
        return list(specs.values())
    names = [n.strip() for n in functions.split(",") if n.strip()]
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise InputError(f"unknown function(s) {unknown}; the suite has {sorted(specs)}", field="--functions")
    return [specs[n] for n in names]


@app.command("render")
def render_cmd(
    out: Path = typer.Option(..., "--out", "-o", help="Directory to write the lab's manifests to."),
    config: Path | None = typer.Option(None, "--config", help="KubeSchedulerConfiguration to ship (default: upstream weights)."),
    profile: str | None = typer.Option(None, "--profile", help="Which profile of --config (by schedulerName)."),
    weights: str = typer.Option("", "--weights", help='Score weights instead of --config, e.g. "NodeResourcesFit=5".'),
    strategy: str | None = typer.Option(None, "--strategy", help="NodeResourcesFit strategy with --weights."),
    namespace: str = typer.Option("default", "--namespace", help="Namespace of the functions' Knative Services."),
    functions: str = typer.Option("", "--functions", help="Comma-separated functions (default: the whole suite)."),
    registry: str | None = typer.Option(None, "--registry", help="Registry of the function images (push: required)."),
    image_mode: str = typer.Option("prebuilt", "--image-mode",
                                   help="How nodes get the images: prebuilt, push (--registry) or load (no registry)."),
    insecure_registry: bool = typer.Option(False, "--insecure-registry",
                                           help="push: --registry speaks plain HTTP (Knative skips its tags)."),
    scheduler_name: str = typer.Option("scoretune-scheduler", "--scheduler-name", help="Name of the second scheduler."),
    openwhisk_namespace: str = typer.Option("openwhisk", "--openwhisk-namespace", help="Namespace of the OpenWhisk release."),
    openwhisk_release: str = typer.Option("owdev", "--openwhisk-release", help="Helm release name of OpenWhisk."),
    domain: str = typer.Option("scoretune.lab", "--domain", help="Domain of the Knative routes (config-domain)."),
    kourier_nodeport: int = typer.Option(31080, "--kourier-nodeport", help="NodePort of Kourier's HTTP gateway."),
    data_plane_replicas: int = typer.Option(1, "--data-plane-replicas", help="Replicas of the activator and of "
                                            "Kourier's gateway, fixed (their HPAs at min = max)."),
) -> None:
    """Write the scheduler's RBAC/ConfigMap/Deployment, Knative's config, the functions' Services
    and the OpenWhisk pod template under OUT; print what changed as JSON."""
    from testbed.kube.render import (
        ImageSource,
        SchedulerSettings,
        lab_documents,
        summary_json,
        write_documents,
    )

    images = ImageSource(image_mode, registry, insecure_registry)
    docs = lab_documents(
        _profile(config, profile, weights, strategy),
        _specs(functions),
        settings=SchedulerSettings(scheduler_name=scheduler_name),
        namespace=namespace,
        openwhisk_namespace=openwhisk_namespace,
        openwhisk_release=openwhisk_release,
        images=images,
        domain=domain,
        kourier_http_nodeport=kourier_nodeport,
        data_plane_replicas=data_plane_replicas,
    )
    typer.echo(summary_json(write_documents(docs, out)))


@app.command("apply")
def apply_cmd(
    config: Path = typer.Option(..., "--config", help="KubeSchedulerConfiguration to run on the lab's scheduler."),
    profile: str | None = typer.Option(None, "--profile", help="Which profile of --config (by schedulerName)."),
    kubeconfig: str | None = typer.Option(None, "--kubeconfig", help="Kubeconfig of the lab (default: ~/.kube/config)."),
    context: str | None = typer.Option(None, "--context", help="Kubeconfig context."),
) -> None:
    """Roll the lab's scoretune-scheduler to CONFIG; rolls back if it does not become ready."""
    from testbed.kube.backend import KubeBackend

    backend = KubeBackend(kubeconfig=kubeconfig, context=context, functions=[])
    try:
        backend.apply(_profile(config, profile, "", None))
    finally:
        backend.close()
    typer.echo(f"scoretune-scheduler runs {config}")


@app.command("driver-kubeconfig")
def driver_kubeconfig_cmd(
    out: Path = typer.Option(..., "--out", "-o", help="Where to write the experiment host's kubeconfig (mode 0600)."),
    kubeconfig: str = typer.Option(..., "--kubeconfig", help="The admin kubeconfig (only read here)."),
    context: str | None = typer.Option(None, "--context", help="Kubeconfig context."),
    hours: float = typer.Option(720.0, "--hours", min=0.2, max=8760.0, help="How long the bound token is valid."),
) -> None:
    """Write a kubeconfig with a bound token of the scoretune-driver ServiceAccount: the roles the
    kube backend needs (testbed/kube/access.py), not cluster-admin."""
    import yaml

    from functions.atomic import write_atomic_with
    from testbed.kube.access import driver_kubeconfig

    text = yaml.safe_dump(driver_kubeconfig(kubeconfig, hours=hours, context=context), sort_keys=False)
    try:
        write_atomic_with(out, lambda tmp: tmp.write_text(text, encoding="utf-8"), mode=None)  # 0600, never wider
    except OSError as err:
        raise TestbedError(f"{out}: cannot write the kubeconfig ({err.strerror})") from None
    typer.echo(f"wrote {out}: scoretune-driver's token, valid {hours:g} h")


@app.command("openwhisk-actions")
def openwhisk_actions_cmd(
    api: str = typer.Option(..., "--api", help="OpenWhisk's API, e.g. https://10.0.0.10:31001."),
    auth: Path = typer.Option(..., "--auth", help="The file with the guest key (.lab/openwhisk/auth.guest)."),
    functions: str = typer.Option("", "--functions", help="Comma-separated functions (default: the whole suite)."),
    ca: str | None = typer.Option(None, "--ca", help="CA bundle of the API's certificate (default: not verified, "
                                  "the chart's nginx serves a self-signed one)."),
) -> None:
    """Create or replace one OpenWhisk action per function (its image, memory, concurrency, a log
    limit of 0) and print each action's version and limits as JSON (what ansible/openwhisk.yml
    records)."""
    import json

    from testbed.kube.openwhisk import deploy_actions, read_openwhisk_key

    deployed = deploy_actions(api, read_openwhisk_key(str(auth)), _specs(functions), verify=ca or False)
    typer.echo(json.dumps({"changed": True, "actions": {fn: a["version"] for fn, a in deployed.items()},
                           "limits": {fn: a["limits"] for fn, a in deployed.items()}}, sort_keys=True))


@app.command("openwhisk-runtimes")
def openwhisk_runtimes_cmd(
    chart: Path = typer.Argument(..., help="openwhisk-deploy-kube's chart directory (helm/openwhisk)."),
) -> None:
    """Write the chart's runtimes manifest without stem cells (runtimes-scoretune.json beside
    runtimes.json): prewarmed containers would be pods the tuned scheduler places on the invoker
    nodes, never serving the suite's actions. Prints what it wrote as JSON (for ansible/openwhisk.yml)."""
    import json

    from testbed.kube.openwhisk import write_stem_cell_free_runtimes

    path, removed = write_stem_cell_free_runtimes(str(chart))
    typer.echo(json.dumps({"changed": True, "path": path, "stem_cells_removed": removed}, sort_keys=True))


@app.command("status")
def status_cmd(
    kubeconfig: str | None = typer.Option(None, "--kubeconfig", help="Kubeconfig of the lab (default: ~/.kube/config)."),
    context: str | None = typer.Option(None, "--context", help="Kubeconfig context."),
    namespace: str = typer.Option("default", "--namespace", help="Namespace of the functions."),
) -> None:
    """Print, as JSON, the scheduler's configuration and leader and every function's state."""
    import json

    from testbed.kube.backend import KubeBackend

    backend = KubeBackend(kubeconfig=kubeconfig, context=context, namespace=namespace)
    try:
        typer.echo(json.dumps(backend.status(), indent=2, sort_keys=True))
    finally:
        backend.close()


@app.command("openwhisk-preflight")
def openwhisk_preflight_cmd(
    core_nodes: str = typer.Option(..., "--core-nodes", help="Comma-separated nodes the core components are pinned to."),
    invoker_nodes: str = typer.Option(..., "--invoker-nodes", help="Comma-separated nodes that run invokers and action pods."),
    user_memory: str = typer.Option(..., "--user-memory", help="Each invoker's whisk.containerPool.userMemory (e.g. 4096m)."),
    kubeconfig: str | None = typer.Option(None, "--kubeconfig", help="Kubeconfig of the lab (default: ~/.kube/config)."),
    context: str | None = typer.Option(None, "--context", help="Kubeconfig context."),
) -> None:
    """Check the cluster's nodes before OpenWhisk goes on them (ansible/openwhisk.yml runs it): the
    core node's memory, the invokers' user memory against the invoker nodes'. One line per problem
    naming the node and the numbers; exit 1 if there is any."""
    import re
    import sys

    from kubernetes import client, config

    from testbed.kube.openwhisk_preflight import preflight_problems

    size = re.fullmatch(r"\s*(\d+)\s*([mMgG])[bB]?\s*", user_memory)  # OpenWhisk's ByteSize: m = MiB, g = GiB
    if size is None:
        raise typer.BadParameter(f"not a memory size: {user_memory!r} (e.g. 4096m)", param_hint="--user-memory")
    user_mib = int(size.group(1)) * (1024 if size.group(2) in "gG" else 1)
    try:
        api = config.new_client_from_config(config_file=kubeconfig, context=context)
        nodes = client.CoreV1Api(api).list_node(_request_timeout=30).items or []
    except (config.ConfigException, OSError, TypeError) as err:
        raise TestbedError(f"{kubeconfig or '~/.kube/config'}: cannot load the kubeconfig ({err})") from None
    except client.ApiException as err:
        raise TestbedError(f"listing the nodes failed: HTTP {err.status} {err.reason}") from None
    split = lambda text: [x.strip() for x in text.split(",") if x.strip()]  # noqa: E731
    problems = preflight_problems([client.ApiClient().sanitize_for_serialization(n) for n in nodes],
                                  core_nodes=split(core_nodes), invoker_nodes=split(invoker_nodes),
                                  user_memory_mib=user_mib)
    for line in problems:
        print(f"scoretune: {line}", file=sys.stderr)
    if problems:
        raise typer.Exit(1)
    typer.echo(f"OpenWhisk fits: core on {core_nodes}, {len(split(invoker_nodes))} invoker(s) of {user_mib} MiB user memory")


@app.command("check-inventory")
def check_inventory_cmd(
    inventory: Path = typer.Argument(..., help="The lab's Ansible inventory (INI or YAML)."),
) -> None:
    """Check a lab inventory before provisioning: the groups, one entry per machine, node names,
    the load generators' addresses. One line per problem; exit 1 if there is any."""
    import sys

    from testbed.kube.inventory import inventory_problems

    problems = inventory_problems(inventory)
    for line in problems:
        print(f"scoretune: {line}", file=sys.stderr)
    if problems:
        raise typer.Exit(1)
    print(f"{inventory}: the inventory has every group the lab needs")
