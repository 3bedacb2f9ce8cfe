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

