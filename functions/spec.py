"""The function spec: the one description of a function that the simulator, the embedded lab and
the Knative manifests all read (DESIGN.md, "Function spec").

A spec is a YAML file beside each handler (``functions/<name>/spec.yaml``). It is parsed once by a
pydantic model (ranges, units) into the frozen :class:`FunctionSpec` the rest of the code trusts.
Quantities are written the Kubernetes way (``250m``, ``128Mi``) and parsed with the official
client's ``parse_quantity`` so they mean exactly what they mean in a pod spec.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from functions.errors import InputError

FUNCTIONS_DIR = Path(__file__).resolve().parent


def parse_quantity(value: str | int | float) -> Decimal:
    """Parse a Kubernetes quantity exactly as the official client does."""
    from kubernetes.utils import parse_quantity as _pq

    return _pq(value)


def cpu_milli(value: str | int | float) -> int:
    """CPU quantity in millicores, rounded up as the API server does for sub-milli values."""
    return int(math.ceil(parse_quantity(value) * 1000))


def memory_bytes(value: str | int | float) -> int:
    return int(math.ceil(parse_quantity(value)))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Image(_Strict):
    name: str = Field(min_length=1)
    size: str | int = Field(description="compressed image size, a quantity such as 180Mi")


class _ResourceList(_Strict):
    cpu: str | int | float
    memory: str | int


class _Resources(_Strict):
    requests: _ResourceList
    limits: _ResourceList


class _Autoscaling(_Strict):
    """Knative ``autoscaling.knative.dev/*`` annotations (serving docs, autoscaling section)."""

    metric: Literal["concurrency", "rps"] = "concurrency"
    target: float = Field(default=100.0, gt=0)
    target_utilization_percentage: float = Field(default=70.0, gt=0, le=100)
    min_scale: int = Field(default=0, ge=0)
    max_scale: int = Field(default=0, ge=0, description="0 means unbounded, as in Knative")
    initial_scale: int = Field(default=1, ge=0)
    scale_down_delay_s: float = Field(default=0.0, ge=0, le=3600)
    stable_window_s: float = Field(default=60.0, ge=6, le=3600)
    panic_window_percentage: float = Field(default=10.0, ge=1, le=100)
    panic_threshold_percentage: float = Field(default=200.0, ge=110, le=1000)

    @model_validator(mode="after")
    def _bounds(self) -> _Autoscaling:
        if self.max_scale and self.min_scale > self.max_scale:
            raise ValueError(f"min_scale {self.min_scale} exceeds max_scale {self.max_scale}")
        return self


class _ColdStart(_Strict):
    """Cold-start parts besides the image pull (whose time is size / the node's pull bandwidth)."""

    start_s: float = Field(ge=0, description="container create and start")
    init_s: float = Field(ge=0, description="runtime import and handler initialisation")


class _Distribution(_Strict):
    distribution: Literal["constant", "lognormal", "exponential"] = "lognormal"
    mean: float = Field(gt=0)
    cv: float = Field(default=0.0, ge=0)


class _Work(_Strict):
    cpu_s: _Distribution = Field(description="CPU seconds per request on a speed-1.0 core")
    memory: str | int = Field(description="memory touched per request, a quantity")
    io_s: float = Field(default=0.0, ge=0, description="non-CPU wait per request (I/O), seconds")


class _Measured(_Strict):
    cpu_s_mean: float = Field(ge=0)
    cpu_s_p50: float = Field(ge=0)
    cpu_s_p95: float = Field(ge=0)
    wall_s_mean: float = Field(ge=0)
    peak_memory_bytes: int = Field(ge=0)
    samples: int = Field(ge=1)
    machine: str = ""
    measured_at: str = ""
    init_s: float = Field(default=0.0, ge=0, description="runtime + handler import and warm-up, seconds")
    baseline_rss_bytes: int = Field(default=0, ge=0, description="resident memory of an idle, warm instance")


class _SpecModel(_Strict):
    name: str = Field(pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    handler: str = Field(description="module:function, e.g. functions.float_ops.handler:handle")
    description: str = ""
    shape: Literal["cpu", "memory", "io", "mixed"] = "cpu"
    image: _Image
    resources: _Resources
    container_concurrency: int = Field(default=0, ge=0, le=1000)
    autoscaling: _Autoscaling = _Autoscaling()
    cold_start: _ColdStart
    work: _Work
    payload: dict[str, Any] = Field(default_factory=dict, description="default request payload")
    requirements: list[str] = Field(
        default_factory=list, description="PyPI requirements of the handler, beyond the runtime's"
    )
    measured: _Measured | None = None

    @field_validator("handler")
    @classmethod
    def _handler(cls, v: str) -> str:
        if ":" not in v:
            raise ValueError("must be 'module:function'")
        return v


@dataclass(frozen=True)
class WorkDistribution:
    distribution: str
    mean: float
    cv: float

    def lognormal_params(self) -> tuple[float, float]:
        """(mu, sigma) of the lognormal with this mean and coefficient of variation."""
        sigma2 = math.log1p(self.cv * self.cv)
        return math.log(self.mean) - sigma2 / 2.0, math.sqrt(sigma2)


@dataclass(frozen=True)
class MeasuredProfile:
    cpu_s_mean: float
    cpu_s_p50: float
    cpu_s_p95: float
    wall_s_mean: float
    peak_memory_bytes: int
    samples: int
    machine: str
    measured_at: str
    init_s: float = 0.0
    baseline_rss_bytes: int = 0


@dataclass(frozen=True)
class Autoscaling:
    metric: str
    target: float
    target_utilization_percentage: float
    min_scale: int
    max_scale: int
    initial_scale: int
    scale_down_delay_s: float
    stable_window_s: float
    panic_window_percentage: float
    panic_threshold_percentage: float


@dataclass(frozen=True)
class FunctionSpec:
    """A function as every backend sees it. Units are in the names."""

    name: str
    handler: str
    description: str
    shape: str
    image: str
    image_size_bytes: int
    cpu_request_milli: int
    cpu_limit_milli: int
    memory_request_bytes: int
    memory_limit_bytes: int
    container_concurrency: int
    autoscaling: Autoscaling
    start_s: float
    init_s: float
    work_cpu_s: WorkDistribution
    work_memory_bytes: int
    work_io_s: float
    payload: dict[str, Any] = field(default_factory=dict)
    measured: MeasuredProfile | None = None
    path: Path | None = None
    requirements: tuple[str, ...] = ()


def _from_model(m: _SpecModel, path: Path | None) -> FunctionSpec:
    return FunctionSpec(
        name=m.name,
        handler=m.handler,
        description=m.description,
        shape=m.shape,
        image=m.image.name,
        image_size_bytes=memory_bytes(m.image.size),
        cpu_request_milli=cpu_milli(m.resources.requests.cpu),
        cpu_limit_milli=cpu_milli(m.resources.limits.cpu),
        memory_request_bytes=memory_bytes(m.resources.requests.memory),
        memory_limit_bytes=memory_bytes(m.resources.limits.memory),
        container_concurrency=m.container_concurrency,
        autoscaling=Autoscaling(**m.autoscaling.model_dump()),
        start_s=m.cold_start.start_s,
        init_s=m.cold_start.init_s,
        work_cpu_s=WorkDistribution(**m.work.cpu_s.model_dump()),
        work_memory_bytes=memory_bytes(m.work.memory),
        work_io_s=m.work.io_s,
        payload=dict(m.payload),
        measured=MeasuredProfile(**m.measured.model_dump()) if m.measured else None,
        path=path,
        requirements=tuple(m.requirements),
    )


def _first_error(file: Path | str, err: ValidationError) -> InputError:
    e = err.errors()[0]
    loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
    return InputError(e["msg"], file=file, field=loc)


def parse_spec(data: dict[str, Any], *, file: Path | str = "<spec>") -> FunctionSpec:
    """Validate a spec mapping; errors name the file and the dotted field."""
    try:
        model = _SpecModel.model_validate(data)
    except ValidationError as err:
        raise _first_error(file, err) from None
    if cpu_milli(model.resources.requests.cpu) > cpu_milli(model.resources.limits.cpu):
        raise InputError("cpu request exceeds the limit", file=file, field="resources.requests.cpu")
    if memory_bytes(model.resources.requests.memory) > memory_bytes(model.resources.limits.memory):
        raise InputError("memory request exceeds the limit", file=file, field="resources.requests.memory")
    return _from_model(model, Path(file) if not str(file).startswith("<") else None)


def load_spec(path: str | Path) -> FunctionSpec:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror}", file=path) from None
    except yaml.YAMLError as err:
        raise InputError(f"not valid YAML: {err}", file=path) from None
    if not isinstance(data, dict):
        raise InputError("a function spec must be a mapping", file=path)
    return parse_spec(data, file=path)


def spec_to_dict(spec: FunctionSpec) -> dict[str, Any]:
    """The YAML form of a spec (inverse of :func:`parse_spec` up to quantity spelling)."""
    d: dict[str, Any] = {
        "name": spec.name,
        "handler": spec.handler,
        "description": spec.description,
        "shape": spec.shape,
        "image": {"name": spec.image, "size": spec.image_size_bytes},
        "resources": {
            "requests": {"cpu": f"{spec.cpu_request_milli}m", "memory": spec.memory_request_bytes},
            "limits": {"cpu": f"{spec.cpu_limit_milli}m", "memory": spec.memory_limit_bytes},
        },
        "container_concurrency": spec.container_concurrency,
        "autoscaling": {k: getattr(spec.autoscaling, k) for k in spec.autoscaling.__dataclass_fields__},
        "cold_start": {"start_s": spec.start_s, "init_s": spec.init_s},
        "work": {
            "cpu_s": {
                "distribution": spec.work_cpu_s.distribution,
                "mean": spec.work_cpu_s.mean,
                "cv": spec.work_cpu_s.cv,
            },
            "memory": spec.work_memory_bytes,
            "io_s": spec.work_io_s,
        },
        "payload": spec.payload,
    }
    if spec.requirements:
        d["requirements"] = list(spec.requirements)
    if spec.measured is not None:
        d["measured"] = {k: getattr(spec.measured, k) for k in spec.measured.__dataclass_fields__}
    return d


def check_suite_functions(functions: Iterable[str], *, file: str | Path) -> None:
    """Refuse a workload ``file`` naming a function the suite lacks, in one line naming the file
    and its ``function`` column, before anything runs (the simulator and the embedded lab run the
    suite's functions only)."""
    specs = discover_specs()
    missing = sorted(set(functions) - set(specs))
    if missing:
        raise InputError(f"unknown function(s) {missing}; the suite has {sorted(specs)}", file=file, field="function")


def discover_specs(root: Path = FUNCTIONS_DIR) -> dict[str, FunctionSpec]:
    """Every ``*/spec.yaml`` under the suite directory, by function name."""
    specs: dict[str, FunctionSpec] = {}
    for path in sorted(root.glob("*/spec.yaml")):
        spec = load_spec(path)
        if spec.name in specs:
            raise InputError(f"duplicate function name {spec.name!r}", file=path, field="name")
        specs[spec.name] = spec
    return specs
