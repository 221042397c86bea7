"""End to end on AWS (EC2, SQS on moto; instances that boot, reached over SSH with fake docker,
tests/providers/aws/ec2_vms.py): a Job with `podFailurePolicy: Ignore on DisruptionTarget` in a
pool of [Spot, OnDemand] with `interruption.fallbackToOnDemandAfter: 2`. An EC2 Spot
interruption warning put on the provider's interruption queue, as EventBridge puts it, gives
the Pod `DisruptionTarget` within a second of the manager reading it; the workload, trapping
SIGTERM, finishes its 10 s checkpoint inside the 2-minute notice; the Pod ends `Failed`
`SpotInterrupted` and its instance is terminated. The Job replaces it without counting a
failure; after the second interruption the replacement is placed on OnDemand, and the Job
completes there with no failure counted."""

from __future__ import annotations

import json
import os
import pwd
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest

from devcluster import DevCluster
from kube import names
from kube.client import Kube, path_for
from placement.blocklist import Blocklist
from providers.aws import AwsProvider
from providers.base import Notice
from tests.support.fixtures import ROOT
from tests.support.polling import wait_for
from tests.support.rigs.placement import events_for, start_nodes, stop_nodes, tier_of
from tests.support.servers.tls import TlsWsgiServer

REGION = "us-east-1"
JOBS = path_for("jobs", namespace="default", group="batch", version="v1")
POOL = "spot-first"
CHECKPOINT = 10  # seconds the workload writes its checkpoint after SIGTERM
NOTICE_TO_MARK = 1.0  # seconds from reading the notice to DisruptionTarget on the Pod (the bound)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Reads:
    """When the manager read each notice (monotonic), by id: the provider's own `notices`,
    timed where it returns (nothing else about it changes)."""

    at: dict[str, float] = field(default_factory=dict)

    def wrap(self, provider: AwsProvider) -> None:
        original = provider.notices

        def notices(wait: float) -> list[Notice]:
            batch = list(original(wait))
            now = time.monotonic()
            for notice in batch:
                self.at.setdefault(notice.id, now)
            return batch

        provider.notices = notices  # type: ignore[method-assign]


def nodepool() -> dict[str, Any]:
    return {
        "apiVersion": f"{names.NODEPOOL_GROUP}/{names.NODEPOOL_VERSION}",
        "kind": names.NODEPOOL_KIND,
        "metadata": {"name": POOL},
        "spec": {
            "providers": [{"name": "aws", "regions": [REGION]}],
            "capacityTypes": ["Spot", "OnDemand"],
            "strategy": "Ordered",
            "interruption": {"blocklistTTL": "1s", "fallbackToOnDemandAfter": 2, "window": "1h"},
        },
    }


def workload(file: Path) -> str:
    """Runs 1 and 2 wait to be interrupted and checkpoint on SIGTERM; run 3 resumes and ends 0."""
    return (
        f"n=$(cat {file}.runs 2>/dev/null || echo 0); n=$((n+1)); echo $n > {file}.runs; "
        f"if [ $n -ge 3 ]; then echo resumed $n >> {file}; exit 0; fi; "
        f"trap 'echo term $n >> {file}; sleep {CHECKPOINT}; echo checkpoint $n >> {file}; exit 143' TERM; "
        f"echo started $n >> {file}; while true; do sleep 0.2; done"
    )


def job(file: Path) -> dict[str, Any]:
    labels = {names.ENABLED_LABEL: "true", names.POOL_LABEL: POOL}
    container = {
        "name": "main",
        "image": "busybox:1.36",
        "command": ["sh", "-c", workload(file)],
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "backoffLimit": 0,
            "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 60, "containers": [container]},
            },
        },
    }


def spot_warning(ec2_id: str) -> str:
    """The message EventBridge puts on the queue for EC2's two-minute Spot warning, issued now."""
    return json.dumps(
        {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2",
            "account": "123456789012",
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": REGION,
            "resources": [f"arn:aws:ec2:{REGION}:123456789012:instance/{ec2_id}"],
            "detail": {"instance-id": ec2_id, "instance-action": "terminate"},
        }
    )


def job_pods(kube: Kube) -> list[dict[str, Any]]:
    items, _ = kube.list(path_for("pods", namespace="default"), labelSelector="batch.kubernetes.io/job-name=train")
    return sorted(items, key=lambda p: p["metadata"]["creationTimestamp"] + p["metadata"]["name"])


def running_pod(kube: Kube, run: int) -> dict[str, Any] | None:
    """The Job's `run`-th Pod once it runs."""
    pods = job_pods(kube)
    pod = pods[run - 1] if len(pods) >= run else None
    return pod if pod is not None and (pod.get("status") or {}).get("phase") == "Running" else None


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def pod_named(kube: Kube, name: str) -> dict[str, Any]:
    return kube.get(path_for("pods", namespace="default", name=name))


def failed(kube: Kube, name: str) -> dict[str, Any] | None:
    pod = pod_named(kube, name)
    return pod if (pod.get("status") or {}).get("phase") == "Failed" else None


def ec2_state(instance_id: str) -> str:
    ec2_id = instance_id.split("/")[1]
    reservations = boto3.client("ec2", region_name=REGION).describe_instances(InstanceIds=[ec2_id])["Reservations"]
    return str(reservations[0]["Instances"][0]["State"]["Name"])


@pytest.fixture
def aws_stack(cluster: DevCluster, webhook: TlsWsgiServer, tmp_path: Path) -> Iterator[tuple[AwsProvider, str, Reads]]:
    """The aws virtual node and placement (the manager's `Leading`) over EC2 on moto whose
    instances boot, with an interruption queue; yields the provider, the queue and its reads."""
    from moto import mock_aws

    from providers.aws.keys import generate_key_pair
    from tests.providers.aws.ec2_vms import booting_vms
    from tests.providers.aws.moto_ec2 import make_provider, serve_consoles

    cluster.load_manifests((ROOT / "deploy/crds/nodepool.yaml").read_text())
    user, port = pwd.getpwuid(os.getuid()).pw_name, free_port()
    key_file = tmp_path / "operator-key"
    key_file.write_bytes(generate_key_pair("nebula-operator").private_openssh)
    with mock_aws(), pytest.MonkeyPatch.context() as patch:
        serve_consoles(patch)
        queue = str(boto3.client("sqs", region_name=REGION).create_queue(QueueName="nebula-aws")["QueueUrl"])
        with booting_vms(tmp_path / "vms", region=REGION, ssh_port=port, ssh_user=user):
            options = {"ssh_port": port, "ssh_user": user, "ssh_key_file": str(key_file), "connect_timeout": 5}
            provider = make_provider("cluster-a", ssh=True, interruption_queue=queue, **options)
            reads = Reads()
            reads.wrap(provider)
            nodes = start_nodes(cluster, {"aws": provider}, Blocklist())
            try:
                yield provider, queue, reads
            finally:
                stop_nodes(nodes)


def interrupt(kube: Kube, queue: str, reads: Reads, pod: dict[str, Any], file: Path, run: int) -> None:
    """Put a Spot warning for `pod`'s instance on the queue; check the whole graceful stop."""
    name = pod["metadata"]["name"]
    instance = pod["metadata"]["annotations"][names.INSTANCE_ID_ANNOTATION]
    body = spot_warning(instance.split("/")[1])
    boto3.client("sqs", region_name=REGION).send_message(QueueUrl=queue, MessageBody=body)
    notice_id = json.loads(body)["id"]
    marked = wait_for(lambda: condition(pod_named(kube, name), "DisruptionTarget"), 30, 0.02, what="DisruptionTarget")
    took = time.monotonic() - reads.at[notice_id]
    print(f"run {run}: DisruptionTarget {took:.3f}s after the notice was read")  # the figure, with -s
    assert took <= NOTICE_TO_MARK, f"DisruptionTarget {took:.2f}s after the notice was read"
    assert (marked["status"], marked["reason"]) == ("True", "TerminationByKubelet")
    assert "EC2 Spot Instance Interruption Warning" in marked["message"]

    ended = wait_for(lambda: failed(kube, name), CHECKPOINT + 60, what=f"run {run} ends Failed after its checkpoint")
    assert ended["status"]["reason"] == names.REASON_SPOT_INTERRUPTED
    (status,) = ended["status"]["containerStatuses"]
    assert status["state"]["terminated"]["exitCode"] == 143  # its own exit, after the checkpoint
    assert f"checkpoint {run}" in file.read_text().split("\n")
    wait_for(lambda: ec2_state(instance) in ("shutting-down", "terminated"), 60, what="the instance terminated")


def test_spot_notices_stop_gracefully_the_job_ignores_them_and_the_third_run_falls_back_to_on_demand(
    cluster: DevCluster, kube: Kube, aws_stack: tuple[AwsProvider, str, Reads], tmp_path: Path
) -> None:
    provider, queue, reads = aws_stack
    file = tmp_path / "work.log"
    file.touch()
    kube.create(path_for(names.NODEPOOL_PLURAL, group=names.NODEPOOL_GROUP, version=names.NODEPOOL_VERSION), nodepool())
    kube.create(JOBS, job(file))

    for run in (1, 2):
        pod = wait_for(lambda run=run: running_pod(kube, run), 180, what=f"run {run} running")
        assert tier_of(pod) == "Spot"  # fewer interruptions than the pool's fallbackToOnDemandAfter
        wait_for(lambda run=run: f"started {run}" in file.read_text(), 60, what=f"run {run} started")
        interrupt(kube, queue, reads, pod, file, run)

    third = wait_for(lambda: job_pods(kube)[2] if len(job_pods(kube)) >= 3 else None, 120, what="the third Pod")
    name = third["metadata"]["name"]
    assert wait_for(lambda: tier_of(pod_named(kube, name)), 60, what="the third Pod placed") == "OnDemand"
    fallback = wait_for(lambda: events_for(kube, names.EVENT_FALLBACK_TO_ON_DEMAND), 30, what="FallbackToOnDemand")
    assert "fallbackToOnDemandAfter" in fallback[0]["message"]

    done = wait_for(
        lambda: (kube.get(f"{JOBS}/train").get("status") or {}).get("succeeded") == 1 and kube.get(f"{JOBS}/train"),
        180,
        what="the Job completes on the OnDemand replacement",
    )
    assert not done["status"].get("failed")  # neither interruption counted as a failure
    assert "resumed 3" in file.read_text()
    assert len(job_pods(kube)) == 3 and provider.owner.key  # three runs, no more
