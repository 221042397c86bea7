"""Which EC2 instances are this owner's, and their facts: the owner filters, describe by
id, the claim lookup behind provision, the list of every region, and the serial console of
one of them (for `logs`).

Called by `AwsProvider`. Only instances tagged `nebula.io/owner=<owner.key>` (and
`nebula.io/managed=true`) exist here: EC2 filters the list and the claim lookup by those
tags, and describe-by-id checks the tag, so another cluster's instance, or one launched by
a Nebula from before owners (a claim tag, no owner tag), is never seen, adopted or touched.

Invariant: two owners sharing an account never see each other's instances:
tests/providers/aws/test_aws_owner.py::test_two_clusters_sharing_an_account_never_touch_each_others_instances.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from providers import base
from providers.aws import logs, status
from providers.aws.ec2 import Ec2
from providers.aws.exits import ExitReader
from providers.aws.options import AwsOptions
from providers.errors import NotFound
from providers.owner import Owner

_PAGE_SIZE = 1000  # DescribeInstances' largest page


class Inventory:
    """This owner's instances in the provider's regions."""

    def __init__(self, ec2: Ec2, options: AwsOptions, owner: Owner, exits: ExitReader, *, name: str) -> None:
        self._ec2 = ec2
        self._options = options
        self._owner = owner
        self._exits = exits
        self._name = name

    def filters(self, *, claim: str | None = None, states: Sequence[str] = ()) -> list[dict[str, Any]]:
        """DescribeInstances filters for this owner's instances (of one claim, in some states)."""
        filters = [
            {"Name": f"tag:{status.TAG_MANAGED}", "Values": ["true"]},
            {"Name": f"tag:{status.TAG_OWNER}", "Values": [self._owner.key]},
        ]
        if claim is not None:
            filters.append({"Name": f"tag:{status.TAG_CLAIM}", "Values": [claim]})
        if states:
            filters.append({"Name": "instance-state-name", "Values": sorted(states)})
        return filters

    def describe(self, instance_id: str) -> tuple[str, dict[str, Any]] | None:
        """(region, EC2 data) of one of this owner's instances, or None if it is not ours or
        EC2 no longer knows it. One DescribeInstances call."""
        parsed = status.parse_instance_id(instance_id)
        if parsed is None or parsed[0] not in self._options.regions:
            return None
        region, ec2_id = parsed
        try:
            result = self._ec2.call(region, "describe_instances", InstanceIds=[ec2_id])
        except NotFound:
            return None
        for reservation in result.get("Reservations") or ():
            for data in reservation.get("Instances") or ():
                if status.is_owned(data, self._owner.key):
                    return region, data
        return None

    def console(self, instance_id: str, region: str, ec2_id: str, prefix: bytes) -> logs.Snapshot | None:
        """The console now (only the lines of the container whose `prefix` is given), and
        whether more may come (the instance still runs); None once EC2 no longer shows it."""
        found = self.describe(instance_id)
        if found is None:
            return None
        try:
            result = self._ec2.call(region, "get_console_output", InstanceId=ec2_id)
        except NotFound:
            return None
        live = status.state_of(found[1]) in status.ADOPTABLE_STATES
        output = logs.decode_console(result.get("Output"))
        return logs.Snapshot(logs.lines_of(output, prefix) if prefix else output, live=live)

    def facts(self, region: str, data: dict[str, Any]) -> base.Instance:
        """The `Instance` for one owned DescribeInstances entry (its console read if due)."""
        verdicts = self._exits.verdicts(region, [data])
        return status.instance_from(data, region, verdicts.get(status.instance_id(region, str(data["InstanceId"]))))

    def claim_instances(self, region: str, claim: str) -> list[dict[str, Any]]:
        """Every instance of this owner with this claim in `region`, in any state EC2 still shows."""
        pages = self._ec2.pages(region, "describe_instances", Filters=self.filters(claim=claim))
        return [data for data in _entries(pages) if status.is_owned(data, self._owner.key)]

    def list(self) -> builtins.list[base.Instance]:
        """One paginated DescribeInstances per region, all regions at once; any failure fails
        the list. Oldest first, so a claim's replacement comes after the instance it replaced."""
        regions = self._options.regions
        with ThreadPoolExecutor(max_workers=len(regions), thread_name_prefix=f"aws-list-{self._name}") as pool:
            found = [instance for listed in pool.map(self._list_region, regions) for instance in listed]
        return sorted(found, key=lambda instance: instance.created_at)

    def _list_region(self, region: str) -> builtins.list[base.Instance]:
        pages = self._ec2.pages(
            region, "describe_instances", Filters=self.filters(), PaginationConfig={"PageSize": _PAGE_SIZE}
        )
        owned = [data for data in _entries(pages) if status.is_owned(data, self._owner.key)]
        verdicts = self._exits.verdicts(region, owned)
        instances = [
            status.instance_from(data, region, verdicts.get(status.instance_id(region, str(data["InstanceId"]))))
            for data in owned
        ]
        self._exits.keep_only(region, [instance.id for instance in instances])
        return instances


def _entries(pages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The instance entries of DescribeInstances pages (pages > reservations > instances)."""
    return [
        data
        for page in pages
        for reservation in page.get("Reservations") or ()
        for data in reservation.get("Instances") or ()
    ]
