"""Field errors in the words of upstream validation, shared by config.py and the plugins' args.

kube-scheduler reports ``field.Error`` values (``FIELD: Invalid value: V: why``,
``FIELD: Required value: why``; ``k8s.io/apimachinery/pkg/util/validation/field``), and its strict
decoder refuses values of the wrong JSON type before validation runs. Every helper here returns
such a line, with the field path from the document root, or an empty list.
"""

from __future__ import annotations

import json
import re
from typing import Any

from testbed.errors import ConfigError
from testbed.scheduler.selectors import kind_of, parse_node_selector_terms

_LABEL_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_GO_BITS = {"int32": 32, "int64": 64}


def invalid(path: str, value: Any, msg: str) -> str:
    return f"{path}: Invalid value: {json.dumps(value)}: {msg}"


def required(path: str, msg: str) -> str:
    return f"{path}: Required value: {msg}"


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def show(value: Any) -> str:
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)


def type_error(path: str, value: Any, want: str) -> str:
    """A value of the wrong JSON type: kube-scheduler's strict decoder refuses it before
    validation runs (``cannot unmarshal ... into Go struct field``)."""
    return f"{path}: Invalid value: {show(value)}: must be {want}, not {kind_of(value)}"


def int_errors(path: str, value: Any, *, lo: int, hi: int, msg: str, go_type: str = "int32") -> list[str]:
    """An integer field: not an integer (or a bool, or NaN) is a decoding error, outside the Go
    type's range too (``go_type``), then ``lo..hi`` is upstream's validation rule with its message."""
    if not is_int(value):
        return [type_error(path, value, "an integer")]
    if not -(2 ** (_GO_BITS[go_type] - 1)) <= value < 2 ** (_GO_BITS[go_type] - 1):
        return [invalid(path, value, f"does not fit {go_type}, the type of this field")]
    if not lo <= value <= hi:
        return [invalid(path, value, msg)]
    return []


def label_name_errors(path: str, v: Any) -> list[str]:
    """``metav1validation.ValidateLabelName``: a qualified name (optional DNS prefix ``/`` name)."""
    if not isinstance(v, str):
        return [type_error(path, v, "a string")]
    if not _LABEL_NAME.match(v) or len(v.rpartition("/")[2]) > 63:
        return [invalid(path, v, "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character")]
    return []


def node_terms_errors(raw: Any, path: str) -> list[str]:
    try:
        parse_node_selector_terms(raw, field=path)
    except ConfigError as err:
        return [f"{err.field}: Invalid value: {err.detail}"]
    return []
