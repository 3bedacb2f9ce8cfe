"""Resetting a real cluster between steps (:meth:`ImageCacheReset.reset`): every function pod gone
(the KPA's scale-to-zero), then every node's function-image cache brought to the state the
experiment declares (:class:`ImageState`: warm everywhere but the cold nodes) by image-state pods
that purge and pull through containerd. A part of :class:`testbed.kube.backend.KubeBackend`."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from testbed.errors import LabFault, TestbedError
from testbed.kube.faults import (
    REVISION_API,
    SERVICE_LABEL,
)
from testbed.kube.images import FunctionImage, NodeImages, parse_report, repository
from testbed.kube.images import problems as image_problems
from testbed.kube.nodes import describe
from testbed.kube.render import (
    image_state_pod,
)
from testbed.kube.rollout import broken
from testbed.kube.versions import KNATIVE_SERVICE_API

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ImageState:
    """The function-image cache every node starts each step from (what the experiment declares).

    Every schedulable node holds every function image, except ``cold_nodes``, which hold none:
    ImageLocality scores and cold-start times then depend on the profile under test, not on where
    earlier steps happened to put pods. ``enforce=False`` leaves the caches as they are (each run
    still records them). ``load``-mode images have no registry to pull them from again: purge them
    (cold nodes) only with ``push`` or ``prebuilt`` images.
    """

    cold_nodes: tuple[str, ...] = ()
    enforce: bool = True

    def declared(self) -> dict[str, Any]:
        return {"enforce": self.enforce, "warm": "every other schedulable node", "cold_nodes": list(self.cold_nodes)}


class ImageCacheReset:
    """The reset between steps: drain the functions, restore every node's image cache."""

    def reset(self) -> None:
        """Before every step: wait until every function is scaled to zero (no pod of any function
        remains), check every node against the baseline (:meth:`node_problems`), then bring every
        node's function-image cache to :attr:`image_state` and record it (``summary.json``
        ``image_state`` of the next run). A lab that cannot get there raises :class:`LabFault`."""
        names = self._function_names()
        self._drain(names)
        unhealthy = self.node_problems()
        if unhealthy:
            raise LabFault(f"node health: {describe(unhealthy)}")
        self._image_record = self._restore_images(names)

    def _drain(self, names: Sequence[str]) -> None:
        selector = f"{SERVICE_LABEL} in ({','.join(names)})"
        deadline = time.monotonic() + self.timeouts.drain_s
        while True:
            pods = self._call(f"listing function pods in {self.namespace}", self._core.list_namespaced_pod,
                              self.namespace, label_selector=selector).items or []
            if not pods:
                log.info("every function is at zero pods")
                return
            if time.monotonic() >= deadline:
                left = ", ".join(sorted(f"{p.metadata.name} ({(p.metadata.labels or {}).get(SERVICE_LABEL)})"
                                        for p in pods))
                raise LabFault(
                    f"timed out after {self.timeouts.drain_s:.0f} s waiting for the functions to scale to zero; "
                    f"{len(pods)} pod(s) remain: {left}"
                )
            time.sleep(self.timeouts.poll_s)

    def _function_images(self, names: Sequence[str]) -> list[FunctionImage]:
        """Each function container's image as its Service names it and as its ready Revision runs
        it (``status.containerStatuses[].imageDigest``, the digest Knative resolved the tag to)."""
        group, version, plural = KNATIVE_SERVICE_API
        out: list[FunctionImage] = []
        for fn in names:
            svc = self._call(f"reading Knative Service {self.namespace}/{fn}", self._custom.get_namespaced_custom_object,
                             group, version, self.namespace, plural, fn)
            containers = (((svc.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
            digests: dict[str, str] = {}
            revision = (svc.get("status") or {}).get("latestReadyRevisionName")
            if revision:
                rgroup, rversion, rplural = REVISION_API
                rev = self._call(f"reading Knative Revision {self.namespace}/{revision}",
                                 self._custom.get_namespaced_custom_object, rgroup, rversion, self.namespace, rplural,
                                 revision, allow=(404,)) or {}
                for cs in (rev.get("status") or {}).get("containerStatuses") or []:
                    if cs.get("imageDigest"):
                        digests[repository(cs["imageDigest"])] = cs["imageDigest"]
            for c in containers:
                image = c.get("image")
                if image and all(i.image != image or i.function != fn for i in out):
                    out.append(FunctionImage(fn, image, digests.get(repository(image))))
        return out

    def _restore_images(self, names: Sequence[str]) -> dict[str, Any]:
        """Run one image-state pod per schedulable node (render.image_state_pod), wait for all,
        read what each node holds from its log, delete the pods, and check the declared state by
        repository (testbed.kube.images). A node that cannot be brought there is a :class:`LabFault`
        naming the node and the image: the step is void and retried, not scored."""
        state = self.image_state
        t0 = time.monotonic()
        images = self._function_images(names)
        always = self._platform_images()
        nodes = [n.metadata.name for n in self._call("listing nodes", self._core.list_node).items or []
                 if self._schedulable(n)]
        unknown = sorted(set(state.cold_nodes) - set(nodes))
        if unknown:
            raise TestbedError(f"image state: cold node(s) {unknown} are not schedulable nodes of the cluster "
                               f"(schedulable: {nodes})")
        if not state.enforce:
            return {"declared": state.declared(), "nodes": None, "seconds": round(time.monotonic() - t0, 3)}
        self._resets += 1
        token = f"{int(time.time())}-{self._resets}"
        ns = self.image_namespace
        repos = sorted({i.repository for i in images})
        runs = sorted({i.runs for i in images})
        pods: dict[str, str] = {}
        try:
            for i, node in enumerate(nodes):
                cold = node in state.cold_nodes
                body = image_state_pod(f"scoretune-images-{token}-{i}", node, repositories=repos,
                                       pull=([] if cold else runs) + always, purge=repos if cold else [], token=token,
                                       namespace=ns, tool_image=self.image_tool)
                self._call(f"creating the image-state pod on {node}", self._core.create_namespaced_pod, ns, body)
                pods[node] = body["metadata"]["name"]
            held = self._wait_image_pods(pods)
        finally:
            for pod in pods.values():
                try:
                    self._call(f"deleting the image-state pod {ns}/{pod}", self._core.delete_namespaced_pod, pod, ns,
                               grace_period_seconds=0)
                except TestbedError as err:
                    log.warning("%s", err)
        found = [p for node in nodes for p in image_problems(node, held[node], cold=node in state.cold_nodes,
                                                               images=images)]
        if found:
            raise LabFault(
                "image state: the nodes' function-image caches could not be brought to the declared state: "
                + "; ".join(found) + " (load-mode images cannot be pulled back: re-run ansible/functions.yml, or "
                "use push/prebuilt images for cold nodes; docs/lab.md \"Troubleshooting\")")
        record = {"declared": state.declared(),
                  "images": [{"function": i.function, "image": i.image, "runs": i.runs} for i in images],
                  "platform_images": always,
                  "nodes": {n: sorted(r for refs in held[n].holds.values() for r in refs) for n in nodes},
                  "seconds": round(time.monotonic() - t0, 3)}
        log.info("image state restored on %d node(s) in %.1f s", len(nodes), record["seconds"])
        return record

    def _platform_images(self) -> list[str]:
        """Images every schedulable node is given at each reset whatever the declared state (the
        platform's own, never purged, so no step pulls them from outside); Knative: none."""
        return []

    def _wait_image_pods(self, pods: dict[str, str]) -> dict[str, NodeImages]:
        ns = self.image_namespace
        deadline = time.monotonic() + self.timeouts.images_s
        held: dict[str, NodeImages] = {}
        while True:
            for node, pod in pods.items():
                if node in held:
                    continue
                obj = self._call(f"reading the image-state pod {ns}/{pod}", self._core.read_namespaced_pod, pod, ns)
                phase = obj.status.phase if obj.status else None
                waiting = broken([obj])
                if waiting:
                    raise LabFault(f"image state: the pod on {node} cannot run: {waiting} "
                                   f"(its image is {self.image_tool}; crictl comes from the node's /usr/local/bin/crictl)")
                if phase not in ("Succeeded", "Failed"):
                    continue
                text = self._call(f"reading the log of {ns}/{pod}", self._core.read_namespaced_pod_log, pod, ns,
                                  container="crictl")
                rec = parse_report(text)
                if phase == "Failed" or not rec.complete:
                    raise LabFault(f"image state: the pod on {node} ended {phase} before reporting the node's images "
                                   f"(log: {str(text).strip()[:300] or 'empty'})")
                held[node] = rec
            if len(held) == len(pods):
                return held
            if time.monotonic() >= deadline:
                left = sorted(set(pods) - set(held))
                raise LabFault(f"timed out after {self.timeouts.images_s:.0f} s waiting for the image-state pods "
                               f"on {', '.join(left)}")
            time.sleep(self.timeouts.poll_s)


__all__ = ["ImageCacheReset", "ImageState"]
