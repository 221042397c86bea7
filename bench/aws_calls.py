"""Benchmark: EC2 API calls per `AwsProvider` operation, on moto's in-process EC2 (no vnode).

Counts every request the provider's boto3 client sends (botocore's `before-call` event: one
per call, one per page of a paginated call) for: provisioning one Pod; deleting one Pod
(terminate, then get until EC2 shows it terminated); a list of N owned running instances
(the pages); and a list of the same N once their VMs terminated, first (each console read
once) and again (the exit cache answers). Prints a table; no timings: moto's speed is not EC2's.
Usage: python bench/aws_calls.py [--instances 500]
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402

from providers.aws import AwsProvider, launch  # noqa: E402
from providers.base import InstanceState, PodSpec, ProvisionRequest  # noqa: E402
from providers.claim import claim_name  # noqa: E402
from providers.owner import Owner  # noqa: E402

REGION = "us-east-1"


def make_pod(index: int) -> PodSpec:
    return PodSpec(namespace="bench", name=f"worker-{index}", uid=str(uuid.uuid4()), container="main",
                   image="ghcr.io/example/trainer:1", command=("python", "-m", "train"))  # fmt: skip


def request_for(pod: PodSpec) -> ProvisionRequest:
    return ProvisionRequest(claim=claim_name(pod.namespace, pod.name, pod.uid))


class CallCounter:
    """EC2 operations sent by one provider's client, by name."""

    def __init__(self, provider: AwsProvider) -> None:
        self.seen: Counter[str] = Counter()
        provider._ec2.client(REGION).meta.events.register("before-call.ec2", self._record)

    def _record(self, **kwargs: Any) -> None:
        self.seen[kwargs["model"].name] += 1

    def during(self, action: Callable[[], object]) -> Counter[str]:
        before = Counter(self.seen)
        action()
        return self.seen - before


def delete(provider: AwsProvider, instance_id: Any) -> None:
    """What the vnode does for a deleted Pod: terminate, then get until EC2 says terminated."""
    provider.terminate(instance_id)
    while True:
        seen = provider.get(instance_id)
        if seen is None or seen.state is InstanceState.TERMINATED:
            return


def seed(provider: AwsProvider, count: int) -> list[str]:
    """`count` running instances tagged as `provision` tags them, launched straight through
    boto3 (moto's claim lookup is slow with many instances, and provision is measured above)."""
    ec2 = boto3.client("ec2", region_name=REGION)
    ids = []
    for index in range(1, count + 1):
        pod = make_pod(index)
        tags = launch.tags(pod, request_for(pod), provider=provider.name, owner=provider.owner,
                           host_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBench")  # fmt: skip
        launched = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="m7i.large",
                                     TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])  # fmt: skip
        ids.append(f"{REGION}/{launched['Instances'][0]['InstanceId']}")
    return ids


def breakdown(calls: Counter[str]) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(calls.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=500)
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    rows: list[tuple[str, Counter[str]]] = []
    with mock_aws():
        provider = AwsProvider("aws", {"regions": [REGION], "ami": "ami-12c6146b", "ssh": False},
                               owner=Owner("bench", "aws"))  # fmt: skip
        counter = CallCounter(provider)
        pod = make_pod(0)
        result: list[Any] = []
        rows.append(
            ("provision one Pod", counter.during(lambda: result.append(provider.provision(pod, request_for(pod)))))
        )
        rows.append(
            ("get it (the vnode's read after provision)", counter.during(lambda: provider.get(result[0].instance_id)))
        )
        rows.append(("delete one Pod (terminate + get until terminated)",
                     counter.during(lambda: delete(provider, result[0].instance_id))))  # fmt: skip
        ids = seed(provider, args.instances)
        rows.append((f"list {args.instances} running instances (+1 terminated)", counter.during(provider.list)))
        ec2 = boto3.client("ec2", region_name=REGION)
        for start in range(0, len(ids), 500):
            ec2.terminate_instances(InstanceIds=[i.split("/")[1] for i in ids[start : start + 500]])
        rows.append(("list them once their VMs terminated (first list)", counter.during(provider.list)))
        rows.append(("the same list again (exits cached)", counter.during(provider.list)))
    width = max(len(row[0]) for row in rows)
    print(f"{'operation':<{width}}  {'EC2 calls':>9}  breakdown")
    for what, calls in rows:
        print(f"{what:<{width}}  {sum(calls.values()):>9}  {breakdown(calls)}")
    pages = -(-(args.instances + 1) // 1000)
    print(f"(a paginated call counts once per page; moto answers DescribeInstances in one page whatever its size,"
          f" EC2 in pages of up to 1000: {pages} per list of {args.instances + 1} per region there)")  # fmt: skip


if __name__ == "__main__":
    main()
