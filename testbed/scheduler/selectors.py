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
        values = e.get("values") or []
        if not isinstance(values, list):
            raise _fail("must be a list of strings", file, f"{f}.values")
        out.append(Requirement(e["key"], op, tuple(str(v) for v in values)))
    return tuple(out)


def parse_label_selector(raw: Any, *, file: str | None = None, field: str = "labelSelector") -> LabelSelector | None:
    """``None`` for an absent selector (selects nothing), else the ANDed requirements."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise _fail("must be a mapping", file, field)
    reqs = [Requirement(str(k), "In", (str(v),)) for k, v in sorted((raw.get("matchLabels") or {}).items())]
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
        op = t.get("operator") or "Equal"
        if op not in ("Equal", "Exists"):
            raise _fail(f"operator {op!r} is not Equal or Exists", file, f"{field}[{i}].operator")
        out.append(Toleration(str(t.get("key") or ""), op, str(t.get("value") or ""), str(t.get("effect") or "")))
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
