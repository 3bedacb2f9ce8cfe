"""Label selectors, node selectors and tolerations, matched the way Kubernetes matches them.

Ported from upstream (paraphrased, no Go copied):

- ``staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/helpers.go`` (``LabelSelectorAsSelector``):
  a nil selector selects nothing, an empty one selects everything; ``matchLabels`` and
  ``matchExpressions`` (In, NotIn, Exists, DoesNotExist) are ANDed.
- ``staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go``:
  node selector terms are ORed, the requirements inside a term are ANDed, a term with no
  requirements matches nothing; operators In, NotIn, Exists, DoesNotExist, Gt, Lt; ``matchFields``
  supports only ``metadata.name``.
- ``staging/src/k8s.io/api/core/v1/toleration.go`` (``ToleratesTaint``): the effect must be empty or
  equal, the key empty (with Exists) or equal, and the operator Exists or the values equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from testbed.errors import ConfigError

_LABEL_OPS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
_NODE_OPS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


@dataclass(frozen=True)
class Requirement:
    """One ``key op values`` requirement of a label or node selector."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "In":
            return self.key in labels and labels[self.key] in self.values
        if op == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if op == "Exists":
            return self.key in labels
        if op == "DoesNotExist":
            return self.key not in labels
        if op in ("Gt", "Lt"):
            # nodeaffinity.go: both the label value and the single requirement value parse as int64.
            if self.key not in labels or len(self.values) != 1:
                return False
            try:
                have, want = int(labels[self.key]), int(self.values[0])
            except ValueError:
                return False
            return have > want if op == "Gt" else have < want
        return False


@dataclass(frozen=True)
class LabelSelector:
    """A ``metav1.LabelSelector``; ``None`` in an object means "selects nothing" (see module doc)."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


@dataclass(frozen=True)
class NodeSelectorTerm:
    """One ``nodeSelectorTerms`` entry: label requirements and ``metadata.name`` field requirements."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        if not self.expressions and not self.fields:
            return False
        if not all(r.matches(labels) for r in self.expressions):
            return False
        names = {"metadata.name": node_name}
        return all(r.matches(names) for r in self.fields)


def terms_match(terms: tuple[NodeSelectorTerm, ...], node_name: str, labels: Mapping[str, str]) -> bool:
    """ORed node selector terms (``requiredDuringSchedulingIgnoredDuringExecution``)."""
    return any(t.matches(node_name, labels) for t in terms)


@dataclass(frozen=True)
class Taint:
    """A node's ``spec.taints`` entry (``core/v1`` ``Taint``); the cluster spec reuses it."""

    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, key: str, value: str, effect: str) -> bool:
        if self.effect and self.effect != effect:
            return False
        if self.key and self.key != key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == value


def tolerated(tolerations: tuple[Toleration, ...], key: str, value: str, effect: str) -> bool:
    return any(t.tolerates(key, value, effect) for t in tolerations)


# --- parsing from Kubernetes JSON -----------------------------------------------------------------


def _fail(msg: str, file: str | None, field: str) -> ConfigError:
    return ConfigError(msg, file=file, field=field)


def kind_of(value: Any) -> str:
    """How an error names what it found instead (``"a list"``, ``"the number 5"``), so the user sees the wrong shape."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def expect_mapping(raw: Any, *, file: str | None, field: str) -> dict[str, Any]:
    """A mapping field of a Kubernetes object; absent (None) is empty. Anything else is the
    decoding error the API server's typed decoder would give, as a ConfigError naming the field."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _fail(f"must be a mapping, not {kind_of(raw)}", file, field)
    return raw


def expect_list(raw: Any, *, file: str | None, field: str) -> list[Any]:
    """A list field; absent (None) is empty."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _fail(f"must be a list, not {kind_of(raw)}", file, field)
    return raw


def expect_str(raw: Any, *, file: str | None, field: str, default: str = "") -> str:
    """A string field; absent (None) is ``default``. Numbers and booleans are refused rather than
    converted: the API's decoder refuses them for string fields too."""
    if raw is None:
        return default
    if not isinstance(raw, str):
        raise _fail(f"must be a string, not {kind_of(raw)}", file, field)
    return raw


def expect_str_map(raw: Any, *, file: str | None, field: str) -> dict[str, str]:
    """A ``map[string]string`` (labels, nodeSelector, matchLabels)."""
    out: dict[str, str] = {}
    for k, v in expect_mapping(raw, file=file, field=field).items():
        if not isinstance(k, str):
            raise _fail(f"keys must be strings, not {kind_of(k)}", file, field)
        out[k] = expect_str(v, file=file, field=f"{field}.{k}") if v is not None else ""
    return out


def expect_str_list(raw: Any, *, file: str | None, field: str) -> list[str]:
    return [expect_str(v, file=file, field=f"{field}[{i}]") for i, v in enumerate(expect_list(raw, file=file, field=field))]


def parse_requirements(raw: Any, *, ops: frozenset[str], file: str | None, field: str) -> tuple[Requirement, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _fail("must be a list", file, field)
    out = []
    for i, e in enumerate(raw):
        f = f"{field}[{i}]"
        if not isinstance(e, dict) or not isinstance(e.get("key"), str):
            raise _fail("must be a mapping with a string key", file, f)
        op = e.get("operator")
        if op not in ops:
            raise _fail(f"operator {op!r} is not one of {sorted(ops)}", file, f"{f}.operator")
        values = expect_str_list(e.get("values"), file=file, field=f"{f}.values")
        out.append(Requirement(e["key"], op, tuple(values)))
    return tuple(out)


def parse_label_selector(raw: Any, *, file: str | None = None, field: str = "labelSelector") -> LabelSelector | None:
    """``None`` for an absent selector (selects nothing), else the ANDed requirements."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise _fail("must be a mapping", file, field)
    labels = expect_str_map(raw.get("matchLabels"), file=file, field=f"{field}.matchLabels")
    reqs = [Requirement(k, "In", (v,)) for k, v in sorted(labels.items())]
    reqs.extend(parse_requirements(raw.get("matchExpressions"), ops=_LABEL_OPS, file=file, field=f"{field}.matchExpressions"))
    return LabelSelector(tuple(reqs))


def parse_node_selector_terms(raw: Any, *, file: str | None = None, field: str = "nodeSelectorTerms") -> tuple[NodeSelectorTerm, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _fail("must be a list", file, field)
    terms = []
    for i, t in enumerate(raw):
        f = f"{field}[{i}]"
        if not isinstance(t, dict):
            raise _fail("must be a mapping", file, f)
        fields = parse_requirements(t.get("matchFields"), ops=frozenset({"In", "NotIn"}), file=file, field=f"{f}.matchFields")
        for j, r in enumerate(fields):
            if r.key != "metadata.name":
                raise _fail(f"field key {r.key!r} is not supported (only metadata.name)", file, f"{f}.matchFields[{j}].key")
        terms.append(
            NodeSelectorTerm(
                parse_requirements(t.get("matchExpressions"), ops=_NODE_OPS, file=file, field=f"{f}.matchExpressions"),
                fields,
            )
        )
    return tuple(terms)


def parse_tolerations(raw: Any, *, file: str | None = None, field: str = "spec.tolerations") -> tuple[Toleration, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _fail("must be a list", file, field)
    out = []
    for i, t in enumerate(raw):
        if not isinstance(t, dict):
            raise _fail("must be a mapping", file, f"{field}[{i}]")
        f = f"{field}[{i}]"
        op = t.get("operator") or "Equal"
        if op not in ("Equal", "Exists"):
            raise _fail(f"operator {op!r} is not Equal or Exists", file, f"{f}.operator")
        effect = expect_str(t.get("effect"), file=file, field=f"{f}.effect")
        if effect not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise _fail(f"effect {effect!r} is not NoSchedule, PreferNoSchedule or NoExecute", file, f"{f}.effect")
        secs = t.get("tolerationSeconds")
        if secs is not None and (isinstance(secs, bool) or not isinstance(secs, int)):
            raise _fail(f"must be an integer number of seconds, not {kind_of(secs)}", file, f"{f}.tolerationSeconds")
        key = expect_str(t.get("key"), file=file, field=f"{f}.key")
        value = expect_str(t.get("value"), file=file, field=f"{f}.value")
        out.append(Toleration(key, op, value, effect))
    return tuple(out)


def requirement_to_dict(r: Requirement) -> dict[str, Any]:
    d: dict[str, Any] = {"key": r.key, "operator": r.operator}
    if r.values:
        d["values"] = list(r.values)
    return d


def node_selector_terms_to_list(terms: tuple[NodeSelectorTerm, ...]) -> list[dict[str, Any]]:
    out = []
    for t in terms:
        d: dict[str, Any] = {}
        if t.expressions:
            d["matchExpressions"] = [requirement_to_dict(r) for r in t.expressions]
        if t.fields:
            d["matchFields"] = [requirement_to_dict(r) for r in t.fields]
        out.append(d)
    return out
