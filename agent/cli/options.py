"""Option plumbing shared by the agent's commands: dataclass fields as options, ranges, typed flags."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import math
import sys
import typing
from typing import Any

import typer

from agent.errors import AgentError


def dataclass_command(
    cls: type, run: typing.Callable[..., Any], doc: str, *, context: bool = False
) -> typing.Callable[..., None]:
    """A typer command whose options are the fields of dataclass ``cls``.

    Field metadata: ``help`` (the ``--help`` line), ``short`` (a one-letter alias such as ``-o``)
    and ``option`` (more ``typer.Option`` arguments: ``min``, ``max``, ``callback``). A bool field
    is a ``--x/--no-x`` flag; an Enum-typed field lists its choices. Enum values reach ``cls`` as
    plain strings, so configs and logs written from it hold no enum types. With ``context``,
    ``run`` also gets the click context (to tell typed options from defaults)."""
    hints = typing.get_type_hints(cls)
    params = []
    if context:
        params.append(inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context))
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        is_flag = hints[f.name] is bool
        decls = [f"{flag}/--no-{flag[2:]}" if is_flag else flag]
        if f.metadata.get("short"):
            decls.append(f.metadata["short"])
        # metavar "": a flag takes no value, so --help shows no <bool> type beside it
        option = typer.Option(f.default, *decls, help=f.metadata.get("help"), **({"metavar": ""} if is_flag else {}),
                              **f.metadata.get("option", {}))
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=hints[f.name]))

    def command(ctx: typer.Context | None = None, **kwargs: Any) -> None:
        args = cls(**{k: v.value if isinstance(v, enum.Enum) else v for k, v in kwargs.items()})
        run(args, ctx) if context else run(args)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = doc
    command.__name__ = cls.__name__.lower()
    return command



def finite(low: float, high: float, *, low_open: bool = False) -> typing.Callable[[float], float]:
    """A click callback: a finite float in ``[low, high]`` (``(low, high]`` with ``low_open``);
    click's own ranges let NaN through (every comparison with NaN is false)."""

    def check(value: float) -> float:
        if value is None:
            return value
        bad_low = value <= low if low_open else value < low
        if not math.isfinite(value) or bad_low or value > high:
            raise typer.BadParameter(f"must be a finite number in {'(' if low_open else '['}{low:g}, {high:g}], "
                                     f"got {value}")
        return value

    return check



def given_options(ctx: typer.Context) -> set[str]:
    """The parameters the user typed (not defaults)."""
    from typer._click.core import ParameterSource

    return {name for name in ctx.params if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE}



def opt(text: str, default: Any, *, short: str | None = None, **option: Any) -> Any:
    """A :class:`TuneArgs` field: its ``--help`` line, an optional short alias, typer's range options."""
    return dataclasses.field(default=default, metadata={"help": text, "option": option,
                                                        **({"short": short} if short else {})})



def argv_tail(command: str) -> list[str]:

    return sys.argv[sys.argv.index(command) + 1:] if command in sys.argv else []


def same_cluster(a: str, b: str) -> bool:
    """Two ``--cluster`` values naming the same spec (a name and the path of its file, say)."""
    if a == b:
        return True
    from testbed.cluster import load_cluster

    try:
        return load_cluster(a) == load_cluster(b)
    except Exception:  # noqa: BLE001 - an unreadable spec is simply not the stored one
        return False


def node_names(text: str | None) -> list[str]:
    """``a,b`` as node names (DNS-1123 subdomains, as Kubernetes names nodes), each once."""
    import re

    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    for n in names:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", n):
            raise AgentError(f"--cold-nodes: {n!r} is not a Kubernetes node name")
    if len(set(names)) != len(names):
        raise AgentError(f"--cold-nodes: a node is named twice in {text!r}")
    return names


def address(text: str) -> str:
    """``--master-bind-host``: an IP address (``0.0.0.0`` listens on every interface) or a host name."""
    import ipaddress
    import re

    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        if re.fullmatch(r"(?=.{1,253}$)[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}"
                        r"[A-Za-z0-9])?)*", text):
            return text
    raise AgentError(f"--master-bind-host: {text!r} is not an IP address or a host name")
