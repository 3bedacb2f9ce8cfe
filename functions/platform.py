"""The names of the platforms that serve the functions, and the one check of a platform name.

A name, not the platform: what each platform *is* to the simulator, the embedded lab, the kube
backend and the load generator is one entry of :mod:`testbed.platforms`. The name lives here, in
the lowest package, because every package carries it (the function runtime speaks the platform's
protocol, the load generator records which platform a run had); after the CLI it travels as a
:class:`Platform`, never a bare string.
"""

from __future__ import annotations

from enum import StrEnum

import yaml

from functions.errors import InputError


class Platform(StrEnum):
    """What serves the functions (a typer option annotated ``Platform`` lists them in ``--help``):
    Knative Serving (KPA, activator) or OpenWhisk (controller, invokers)."""

    KNATIVE = "knative"
    OPENWHISK = "openwhisk"


PLATFORMS: tuple[str, ...] = tuple(p.value for p in Platform)
yaml.SafeDumper.add_representer(Platform, lambda dumper, value: dumper.represent_str(value.value))
"""A platform in a YAML file is its name (``yaml.safe_dump`` refuses str subclasses otherwise)."""
DEFAULT_PLATFORM = Platform.KNATIVE


def parse_platform(value: str | Platform, *, field: str = "platform", file: str | None = None) -> Platform:
    """``value`` as a :class:`Platform`, or one :class:`InputError` naming the field and the choices.
    Every place a platform name enters (a CLI option, ``config.json``, ``lab.json``, an
    evaluation's file) goes through here."""
    if isinstance(value, Platform):
        return value
    try:
        return Platform(value)
    except ValueError:
        raise InputError(f"unknown platform {value!r}; one of {', '.join(PLATFORMS)}", field=field, file=file) from None


__all__ = ["DEFAULT_PLATFORM", "PLATFORMS", "Platform", "parse_platform"]
