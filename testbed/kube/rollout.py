"""Rolling the tuned scheduler's profile out on a real cluster (:meth:`SchedulerRollout.apply`):
the configuration's own immutable ConfigMap, the Deployment pointed at it, the wait for ready pods
of the new hash and a leader among them, the rollback on failure, and the collection of old
ConfigMaps. A part of :class:`testbed.kube.backend.KubeBackend`, which holds the API clients, the
settings and the timeouts these methods use."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from testbed.errors import LabFault, TestbedError
from testbed.kube.api import api_message
from testbed.kube.faults import (
    FAILING_WAIT_REASONS,
    condition,
)
from testbed.kube.nodes import get_path as _get
from testbed.kube.render import (
    CONFIG_HASH_ANNOTATION,
    CONFIG_KEY,
    config_hash,
    config_map,
    config_text,
    config_volume_patch,
    mounted_config_map,
    scheduler_config,
)
from testbed.kube.watch import k8s_time

if TYPE_CHECKING:
    from testbed.scheduler.config import Profile

log = logging.getLogger(__name__)


def broken(pods: Iterable[Any]) -> str | None:
    """Why one of ``pods`` cannot run: a container waiting in a failing state (CrashLoopBackOff,
    ImagePullBackOff, ...), with its last exit; None when none is."""
    for p in pods:
        for cs in (p.status.container_statuses if p.status else None) or []:
            waiting = cs.state.waiting if cs.state else None
            if waiting is not None and waiting.reason in FAILING_WAIT_REASONS:
                last = cs.last_state.terminated if cs.last_state else None
                detail = f"; last exit {last.exit_code}: {last.message or last.reason}" if last else ""
                return f"{p.metadata.name} container {cs.name} is {waiting.reason}: {waiting.message or ''}{detail}".rstrip(": ")
    return None


class SchedulerRollout:
    """The scheduler's rollout, rollback and leader lease (see the module docstring)."""

    def apply(self, profile: Profile) -> None:
        """Make ``profile`` the scoretune-scheduler's configuration (see the module docstring)."""
        s = self.settings
        text = config_text(scheduler_config(profile, s))
        digest = config_hash(text)
        name = s.config_map_name(digest)
        dep = self._call(f"reading Deployment {s.namespace}/{s.scheduler_name}",
                         self._apps.read_namespaced_deployment, s.scheduler_name, s.namespace)
        previous_digest = (dep.spec.template.metadata.annotations or {}).get(CONFIG_HASH_ANNOTATION)
        previous_name = mounted_config_map(dep.spec.template.spec)
        if previous_name == name and previous_digest == digest:
            log.info("scheduler configuration %s is already applied", digest)
            if not self._check_config_map(name, text, digest, missing_ok=True):
                # deleted by hand: the running pod keeps its mounted copy, a restarted one would not start
                log.warning("ConfigMap %s/%s of the running configuration is gone; creating it again", s.namespace, name)
                self._create_config_map(text, digest)
            self._wait_ready(digest, name, self.timeouts.rollout_s, "the current configuration")
        else:
            self._create_config_map(text, digest)  # nothing runs on it yet: a failure here changes nothing
            try:
                self._point(digest, name)
                self._wait_ready(digest, name, self.timeouts.rollout_s, "the new configuration")
            except TestbedError as err:  # also a failed patch: the Deployment may name the new ConfigMap
                self._rollback(err, previous_name, previous_digest)
            self._collect({name, previous_name} - {None})
        self._profile = profile
        self._digest = digest
        log.info("scheduler %s/%s runs configuration %s (ConfigMap %s)", s.namespace, s.scheduler_name, digest, name)

    def restore(self, profile: Profile, *, why: str) -> dict[str, Any]:
        """Put the scheduler back on ``profile`` (the reference, or the confirmed best if one was
        applied) after an aborted experiment, and say what state the cluster is in. Never raises:
        the record says ``restored`` true or false, with the error; the tuning loop logs it."""
        record: dict[str, Any] = {"why": why, "profile": profile.scheduler_name}
        try:
            self.apply(profile)
        except TestbedError as err:
            record.update(restored=False, error=str(err), config_hash=self._digest,
                          state=f"the scheduler may still run configuration {self._digest or 'unknown'}")
            log.error("could not restore the scheduler (%s): %s", why, err)
        else:
            record.update(restored=True, config_hash=self._digest,
                          state=f"the scheduler runs configuration {self._digest}")
            log.warning("restored the scheduler to configuration %s (%s)", self._digest, why)
        self.last_restore = record
        return record

    def restoring(self, fallback: Callable[[], Profile]) -> contextlib.AbstractContextManager[None]:
        """:func:`testbed.backend.restoring` for this cluster: a second signal while restoring
        names the configuration the scheduler may still run."""
        from testbed.backend import restoring

        return restoring(self, fallback, state=lambda: f"the scheduler may still run configuration "
                                                       f"{self._digest or 'unknown'} (kube status shows it)")

    def _check_config_map(self, name: str, text: str, digest: str, *, missing_ok: bool = False) -> bool:
        """The ConfigMap ``name`` holds ``text`` and is immutable, so it can never hold anything
        else: what proves the file a pod mounting it reads is configuration ``digest``. False:
        it does not exist (only with ``missing_ok``)."""
        s = self.settings
        cm = self._call(f"reading ConfigMap {s.namespace}/{name}", self._core.read_namespaced_config_map,
                        name, s.namespace, allow=(404,) if missing_ok else ())
        if cm is None:
            return False
        held = (cm.data or {}).get(CONFIG_KEY)
        if held != text:
            got = "no " + CONFIG_KEY if held is None else f"configuration {config_hash(held)}"
            raise TestbedError(f"ConfigMap {s.namespace}/{name} holds {got}, not configuration {digest}: it was not "
                               f"created by scoretune; delete it (kubectl -n {s.namespace} delete configmap {name}) "
                               f"and apply again")
        if cm.immutable is not True:
            raise TestbedError(f"ConfigMap {s.namespace}/{name} is not immutable, so nothing proves the scheduler "
                               f"reads configuration {digest} from it; delete it (kubectl -n {s.namespace} delete "
                               f"configmap {name}) and apply again")
        return True

    def _create_config_map(self, text: str, digest: str) -> None:
        """Create the configuration's immutable ConfigMap; 409 AlreadyExists is fine once its
        content is checked (same name, same content: an earlier apply or Ansible made it)."""
        s = self.settings
        name = s.config_map_name(digest)
        created = self._call(f"creating ConfigMap {s.namespace}/{name}", self._core.create_namespaced_config_map,
                             s.namespace, config_map(text, s), allow=(409,))
        if created is None:
            log.info("ConfigMap %s/%s already exists", s.namespace, name)
            self._check_config_map(name, text, digest)

    def _point(self, digest: str, name: str) -> None:
        """Roll the Deployment onto configuration ``digest`` held by ConfigMap ``name``."""
        s = self.settings
        self._call(f"rolling Deployment {s.namespace}/{s.scheduler_name}", self._apps.patch_namespaced_deployment,
                   s.scheduler_name, s.namespace, config_volume_patch(digest, name))

    def _rollback(self, err: TestbedError, previous_name: str | None, previous_digest: str | None) -> None:
        s = self.settings
        log.error("%s; rolling back to the previous configuration", err)
        if previous_name is None or previous_digest is None:
            raise TestbedError(f"{err}; there is no previous configuration to roll back to") from None
        try:
            self._point(previous_digest, previous_name)
            self._wait_ready(previous_digest, previous_name, self.timeouts.rollback_s, "the previous configuration")
        except TestbedError as again:
            raise TestbedError(f"{err}; rolling back to the previous configuration also failed: {again}") from None
        # the lab is back where it was: a failed rollout of a valid profile is the lab's (a node,
        # an image pull, the lease), so the step is void and retried, not the experiment ended
        raise LabFault(
            f"{err}; rolled back: {s.namespace}/{s.scheduler_name} runs the previous configuration "
            f"({previous_digest}, ConfigMap {previous_name}) again"
        ) from None

    def _collect(self, keep: set[str]) -> None:
        """Delete this scheduler's hashed ConfigMaps beyond :attr:`config_history`: ``keep`` (the
        one in use, the previous one) stay, then the newest others. Never fails the apply: a
        ConfigMap left over is only clutter."""
        s = self.settings
        try:
            listed = self._call(f"listing the ConfigMaps of {s.namespace}/{s.scheduler_name}",
                                self._core.list_namespaced_config_map, s.namespace,
                                label_selector=s.config_selector).items or []
            others = sorted((cm for cm in listed if cm.metadata.name.startswith(s.config_map_prefix)
                             and cm.metadata.name not in keep),
                            key=lambda cm: (k8s_time(cm.metadata.creation_timestamp) or 0.0, cm.metadata.name), reverse=True)
            for cm in others[max(0, self.config_history - len(keep)):]:
                self._call(f"deleting ConfigMap {s.namespace}/{cm.metadata.name}",
                           self._core.delete_namespaced_config_map, cm.metadata.name, s.namespace, allow=(404,))
                log.info("deleted the old scheduler ConfigMap %s/%s", s.namespace, cm.metadata.name)
        except TestbedError as err:
            log.warning("could not delete old scheduler ConfigMaps: %s", err)

    def _wait_ready(self, digest: str, config_map_name: str, timeout_s: float, what: str) -> None:
        """Until the Deployment has rolled out (kubectl's ``rollout status`` rules), the pods with
        ``digest`` are ready, and one of them holds the lease; a pod of the new ReplicaSet that
        crash-loops or cannot pull its image fails at once with the container's own reason, and
        one that carries ``digest`` but mounts another ConfigMap than ``config_map_name`` fails
        too (its file is not the configuration its hash names)."""
        s = self.settings
        deadline = time.monotonic() + timeout_s
        waiting = "the Deployment to be observed"
        while True:
            dep = self._call(f"reading Deployment {s.namespace}/{s.scheduler_name}",
                             self._apps.read_namespaced_deployment, s.scheduler_name, s.namespace)
            pods = self._call(f"listing the pods of {s.namespace}/{s.scheduler_name}", self._core.list_namespaced_pod,
                              s.namespace, label_selector=s.label_selector).items or []
            mine = [p for p in pods if (p.metadata.annotations or {}).get(CONFIG_HASH_ANNOTATION) == digest]
            for p in mine:
                mounted = mounted_config_map(p.spec)
                if mounted != config_map_name:
                    raise TestbedError(f"scheduler pod {p.metadata.name} carries {what} {digest} but mounts ConfigMap "
                                       f"{mounted or 'none'}, not {config_map_name}")
            broken = self._broken(mine)
            if broken:
                raise TestbedError(f"scheduler pod with {what} failed: {broken}")
            waiting = self._rollout_waiting(dep)
            ready = [p.metadata.name for p in mine if _get(condition(p, "Ready"), "status") == "True"
                     and p.metadata.deletion_timestamp is None]
            if waiting is None and not ready:
                waiting = "a ready pod with the configuration"
            if waiting is None:
                if not s.leader_elect:
                    return
                holder = self._lease_holder()
                if holder and any(holder == n or holder.startswith(n + "_") for n in ready):
                    return
                waiting = f"a new pod to take the lease {s.namespace}/{s.scheduler_name} (held by {holder or 'nobody'})"
            if time.monotonic() >= deadline:
                raise TestbedError(
                    f"timed out after {timeout_s:.0f} s waiting for {waiting} "
                    f"(Deployment {s.namespace}/{s.scheduler_name}, {what} {digest})"
                )
            time.sleep(self.timeouts.poll_s)

    @staticmethod
    def _rollout_waiting(dep: Any) -> str | None:
        """kubectl ``rollout status`` for a Deployment (kubectl/pkg/polymorphichelpers/
        rollout_status.go): what is still awaited, or None when complete; a passed progress
        deadline raises."""
        st = dep.status
        if st is None or (dep.metadata.generation or 0) > (st.observed_generation or 0):
            return "the Deployment controller to observe the change"
        for c in st.conditions or []:
            if c.type == "Progressing" and c.reason == "ProgressDeadlineExceeded":
                raise TestbedError(f"Deployment {dep.metadata.namespace}/{dep.metadata.name} exceeded its "
                                   f"progress deadline: {c.message}")
        want = dep.spec.replicas if dep.spec.replicas is not None else 1
        updated = st.updated_replicas or 0
        if updated < want:
            return f"{updated} of {want} updated replicas"
        if (st.replicas or 0) > updated:
            return f"{(st.replicas or 0) - updated} old replica(s) to terminate"
        if (st.available_replicas or 0) < updated:
            return f"{st.available_replicas or 0} of {updated} updated replicas available"
        return None

    _broken = staticmethod(broken)

    def _lease_holder(self) -> str | None:
        from kubernetes.client.exceptions import ApiException

        s = self.settings
        try:
            lease = self._coordination.read_namespaced_lease(s.scheduler_name, s.namespace,
                                                             _request_timeout=self.timeouts.api_s)
        except ApiException as err:
            if err.status == 404:
                return None
            raise TestbedError(f"Kubernetes API: reading Lease {s.namespace}/{s.scheduler_name} failed: "
                               f"{api_message(err)}") from None
        return lease.spec.holder_identity if lease.spec else None


__all__ = ["SchedulerRollout", "broken"]
