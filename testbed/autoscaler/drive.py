"""Drive the KPA decider alone from JSON, the way knative/serving's decider tests do
(``autoscaler_test.go``: a fake pod counter and a fake metric client, ``Scale`` at chosen times).

Used by ``scoretune sim autoscale --spec SPEC.json --steps STEPS.json``. SPEC is a decider spec plus
``ready_pods_at_creation``; STEPS is a list of ``{t_s, ready_pods, observed_stable,
observed_panic}`` with revision-wide observed values; the answer is one ``{t_s,
desired_pod_count, excess_burst_capacity, in_panic}`` per step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from testbed.autoscaler.kpa import Decider, DeciderSpec
from testbed.errors import ConfigError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class DeciderSpecModel(_Strict):
    target_value: float = Field(gt=0)
    total_value: float = Field(gt=0)
    target_burst_capacity: float = Field(default=211.0, ge=-1)
    panic_threshold: float = Field(default=2.0, gt=0, description="a factor: 2.0 = 200 %")
    max_scale_up_rate: float = Field(default=1000.0, gt=0)
    max_scale_down_rate: float = Field(default=2.0, gt=0)
    activator_capacity: float = Field(default=100.0, ge=1)
    stable_window_s: float = Field(default=60.0, gt=0)
    scale_down_delay_s: float = Field(default=0.0, ge=0)
    reachable: bool = True
    activation_scale: int = Field(default=0, ge=0)
    scaling_metric: Literal["concurrency", "rps"] = "concurrency"
    ready_pods_at_creation: int = Field(default=0, ge=0)
    created_s: float = 0.0


class StepModel(_Strict):
    t_s: float
    ready_pods: int = Field(ge=0)
    observed_stable: float = Field(ge=0)
    observed_panic: float = Field(ge=0)


def _load_json(path: str | Path) -> Any:
    p = Path(path)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError(f"cannot read: {err.strerror}", file=p) from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"not UTF-8 text (byte offset {err.start}): expected JSON", file=p) from None
    except RecursionError:
        raise ConfigError("not valid JSON: nested too deeply", file=p) from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"not valid JSON: {err.msg} (line {err.lineno})", file=p) from None


def _first_error(err: ValidationError, file: str | Path, prefix: str = "") -> ConfigError:
    e = err.errors()[0]
    loc = ".".join(str(x) for x in e["loc"])
    return ConfigError(e["msg"], file=file, field=f"{prefix}{loc}" if loc else prefix.rstrip(".") or None)


def run_steps(spec: dict[str, Any], steps: list[dict[str, Any]], *, spec_file: str = "<spec>",
              steps_file: str = "<steps>") -> list[dict[str, Any]]:
    """Create a decider from ``spec`` and call ``Scale`` once per step, in order."""
    try:
        m = DeciderSpecModel.model_validate(spec)
    except ValidationError as err:
        raise _first_error(err, spec_file) from None
    if not isinstance(steps, list):
        raise ConfigError("steps must be a JSON list of {t_s, ready_pods, observed_stable, observed_panic}", file=steps_file)
    parsed: list[StepModel] = []
    for i, raw in enumerate(steps):
        try:
            parsed.append(StepModel.model_validate(raw))
        except ValidationError as err:
            raise _first_error(err, steps_file, f"{i}.") from None
    dspec = DeciderSpec(**m.model_dump(exclude={"ready_pods_at_creation", "created_s"}))
    decider = Decider(dspec, ready_pods_at_creation=m.ready_pods_at_creation, created_s=m.created_s)
    out: list[dict[str, Any]] = []
    for step in parsed:
        r = decider.scale(step.t_s, step.ready_pods, step.observed_stable, step.observed_panic)
        out.append(
            {
                "t_s": step.t_s,
                "desired_pod_count": r.desired_pod_count,
                "excess_burst_capacity": r.excess_burst_capacity,
                "in_panic": decider.in_panic,
            }
        )
    return out


def run_files(spec_path: str | Path, steps_path: str | Path) -> list[dict[str, Any]]:
    return run_steps(_load_json(spec_path), _load_json(steps_path), spec_file=str(spec_path), steps_file=str(steps_path))
