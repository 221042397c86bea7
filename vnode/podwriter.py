"""Everything the vnode writes about a Pod: the connect Secret, then annotations and status.

Called by the Handler's phases. `flush` is the one path Pod metadata takes: annotations
first, so whoever reads a status can also find the instance (design §1.6); a status the
API already shows as terminal is frozen. Every status it writes carries the node's address
as `hostIP`/`hostIPs`, as a kubelet's does (told by the node controller, `advertise_node`;
tests/vnode/test_status_details.py::test_every_status_written_carries_the_nodes_address).
A first write of `Failed` that is no interruption is the "failed" cause, told once per Pod to
the observer (tests/vnode/test_failure_counted_once.py). Writes only: what a Pod reads (its
Secrets and ConfigMaps) is `vnode.sources.reader`'s.
Never logs a Secret's content (I4; see
tests/vnode/test_secrets.py::test_I4_env_values_and_credentials_reach_only_the_provider_and_connect_secret).
"""

from __future__ import annotations

import base64
import ipaddress
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kube import names, observe
from kube.client import ConflictError, Kube, KubeError, NotFoundError, path_for
from kube.events import EventRecorder
from kube.worker import Retry
from vnode.model.tracking import Tracked, pod_key

logger = logging.getLogger(__name__)


def host_ips(addresses: Sequence[Mapping[str, str]]) -> tuple[str, ...]:
    """A Pod's `hostIPs` from its node's `status.addresses`, as the kubelet picks them
    (GetNodeHostIPs): the first InternalIP, else the first ExternalIP, then the first address
    of the other IP family, if any. () when the node has no IP address."""
    ips = []
    for kind in ("InternalIP", "ExternalIP"):
        for address in addresses:
            if address.get("type") == kind:
                try:
                    ips.append(ipaddress.ip_address(str(address.get("address"))))
                except ValueError:
                    continue
    if not ips:
        return ()
    other = next((ip for ip in ips if ip.version != ips[0].version), None)
    return tuple(str(ip) for ip in (ips[0], other) if ip is not None)


class PodWriter:
    def __init__(self, kube: Kube, events: EventRecorder, *, provider: str = "") -> None:
        self._kube = kube
        self._provider = provider  # the metrics' label of a failure it writes
        self._events = events
        self._host_ips: tuple[str, ...] = ()

    def advertise_node(self, addresses: Sequence[Mapping[str, str]]) -> None:
        """The node's `status.addresses`, told by the node controller that publishes them:
        from then on every status written carries its IP (`host_ips`) as `hostIP`/`hostIPs`."""
        self._host_ips = host_ips(addresses)

    def _stamped(self, desired: Mapping[str, Any]) -> dict[str, Any]:
        """`desired` with the node's address, which wins over the one the Pod had (a kubelet
        writes its node's current one each time)."""
        if not self._host_ips:
            return dict(desired)
        return {**desired, "hostIP": self._host_ips[0], "hostIPs": [{"ip": ip} for ip in self._host_ips]}

    def needs_flush(self, entry: Tracked) -> bool:
        pending_annotations = not entry.desired_annotations.items() <= entry.written_annotations.items()
        desired = entry.desired_status
        pending = bool(entry.events) or entry.credential is not None
        return pending or pending_annotations or (desired is not None and desired is not entry.written_status)

    def flush(self, entry: Tracked, current: Mapping[str, Any] | None) -> None:
        """Write what changed: the Events the entry has to tell, the connect Secret of a
        credential not yet written, then annotations and status (the status skipped once the
        Pod is terminal in the API: a terminal status is frozen). Annotations due with a status
        go in the same PATCH of `pods/status` (which takes a Pod's annotations, as the real API
        server's podStatusStrategy does: one write, and nobody reads the status without them);
        with no status due, or when the Secret's write failed, they are a PATCH of the Pod alone.
        The Secret comes first, so a Pod that reads Running has its connect Secret. Raises Retry
        on an API failure; what was not written stays pending for the next flush
        (tests/vnode/test_podwriter.py)."""
        if current is not None and (current.get("metadata") or {}).get("uid") != entry.uid:
            return  # a Pod recreated under the same name is not this entry's
        events, entry.events = entry.events, []
        for event_type, reason, message in events:
            self._events.pod(entry.pod, event_type, reason, message)
        desired, before = entry.desired_status, entry.written_status
        phase = ((current or {}).get("status") or {}).get("phase")
        # A terminal phase is frozen; a Pod stopped at its deadline still tells its containers' ends.
        frozen = phase in ("Succeeded", "Failed") and not (
            entry.stop is not None and (desired or {}).get("phase") == phase
        )
        due = desired is not None and desired != before and not frozen
        if entry.credential is not None:
            try:
                self.write_connect_secret(entry.pod, entry.credential)
            except Retry:
                self._write_annotations(entry)  # the instance must not wait on its Secret (I2)
                raise
            entry.credential = None
        if not due:
            self._write_annotations(entry)  # alone: no status to carry them
        if desired is None or not due:
            entry.written_status = desired  # equal in value, or frozen: nothing to write
            return
        annotations = self._pending_annotations(entry)
        body: dict[str, Any] = {"status": self._stamped(desired)}
        if annotations:
            body["metadata"] = {"annotations": annotations}
        try:
            self._kube.patch(path_for("pods", namespace=entry.namespace, name=entry.name, subresource="status"), body)
        except NotFoundError:
            return
        except KubeError as exc:
            if annotations:
                # The status refused (a 422, say) or not answered: the annotations (the instance
                # id, the billing record) must not wait on it; they go alone, and the status is
                # retried.
                try:
                    self._write_annotations(entry)
                except Retry as alone:
                    logger.info("annotations of %s not written alone either: %s", entry.key, alone)
            raise Retry(f"status write failed: {exc}") from exc
        entry.written_annotations.update(annotations)
        entry.written_status = desired
        reason = str(desired.get("reason") or "")
        failed_before = "Failed" in (phase, (before or {}).get("phase"))  # the API's, or our last write's
        if desired.get("phase") == "Failed" and not failed_before and reason not in names.INTERRUPTED_REASONS:
            # The "failed" cause (an interruption is counted where it is noticed: vnode.phases.giveup).
            subject = observe.Subject(entry.key, entry.claim, entry.instance_id or "")
            observe.current().workload_failed(self._provider, reason or "Failed", subject)

    def write_status(self, pod: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
        """Write the status of a Pod not tracked yet (no instance: it waits to be provisioned);
        False if the write failed (the caller's retry writes it again) or the Pod is gone."""
        metadata = pod.get("metadata") or {}
        path = path_for("pods", namespace=metadata.get("namespace"), name=metadata.get("name"), subresource="status")
        try:
            self._kube.patch(path, {"status": self._stamped(desired)})
        except KubeError as exc:
            logger.info("status of %s/%s not written: %s", metadata.get("namespace"), metadata.get("name"), exc)
            return False
        return True

    @staticmethod
    def _pending_annotations(entry: Tracked) -> dict[str, str]:
        desired = dict(entry.desired_annotations)  # one copy: the notice intake may add one meanwhile
        return {k: v for k, v in desired.items() if entry.written_annotations.get(k) != v}

    def _write_annotations(self, entry: Tracked) -> None:
        pending = self._pending_annotations(entry)
        if not pending:
            return
        try:
            self._kube.patch(
                path_for("pods", namespace=entry.namespace, name=entry.name),
                {"metadata": {"annotations": pending}},
            )
        except NotFoundError:
            return
        except KubeError as exc:
            raise Retry(f"annotation write failed: {exc}") from exc
        entry.written_annotations.update(pending)

    def write_connect_secret(self, pod: Mapping[str, Any], data: Mapping[str, bytes]) -> None:
        meta = pod.get("metadata") or {}
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": names.connect_secret_name(str(meta.get("name"))),
                "namespace": meta.get("namespace"),
                "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": meta.get("name"), "uid": meta.get("uid")}
                ],
            },
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        }
        try:
            self._kube.create(path_for("secrets", namespace=str(meta.get("namespace"))), secret)
        except ConflictError:
            pass  # written by an earlier attempt
        except NotFoundError:
            pass  # the Namespace is gone with the Pod: nobody can read it any more
        except KubeError as exc:
            # Kept pending by the caller (the credential exists only here): retried. No secret in the text.
            logger.warning("could not write the connect Secret for %s (will retry): %s", pod_key(pod), exc.reason)
            self._events.pod(pod, "Warning", "ConnectSecretFailed", f"could not write the connect Secret: {exc.reason}")
            raise Retry(f"connect Secret write failed: {exc.reason}") from exc
