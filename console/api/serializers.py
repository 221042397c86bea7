"""The shapes the REST API returns (and documents in /api/schema/). Read-only: every value
comes from `console.rows`, the one projection the mirror also writes; only names and nesting
differ here (a block's `id` and `scope` object). Called by `console.api.views`.
Tests: tests/console/api/test_api.py.
"""

from __future__ import annotations

from rest_framework import serializers


class BlockScopeSerializer(serializers.Serializer):
    """Read from the row itself (`source="*"`): the projection keeps these columns flat."""

    breadth = serializers.ChoiceField(choices=["provider", "tier", "offering"])
    tier = serializers.CharField(allow_null=True)
    accelerator = serializers.CharField(allow_null=True)
    region = serializers.CharField(allow_null=True)


class BlockEntrySerializer(serializers.Serializer):
    id = serializers.CharField(source="entry_id")
    provider = serializers.CharField()
    scope = BlockScopeSerializer(source="*")
    description = serializers.CharField(source="scope")
    reason = serializers.CharField()
    pool = serializers.CharField(allow_null=True)
    recorded_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    seconds_left = serializers.FloatField()


class PodSerializer(serializers.Serializer):
    namespace = serializers.CharField()
    name = serializers.CharField()
    uid = serializers.CharField()
    provider = serializers.CharField(allow_null=True, help_text="null while placement holds the Pod gated")
    node = serializers.CharField(allow_null=True, help_text="null while placement holds the Pod gated")
    claim = serializers.CharField(allow_null=True, help_text="null while placement holds the Pod gated")
    instance_id = serializers.CharField(allow_null=True)
    phase = serializers.CharField(help_text="Pending until the Pod has a status, as a kubelet reports it")
    reason = serializers.CharField(
        allow_null=True,
        help_text="SchedulingGated while placement holds the Pod; BudgetExceeded for one a Stop budget ended",
    )
    status = serializers.CharField(
        help_text="kubectl get pods' STATUS: the phase or a container's reason (CrashLoopBackOff, Completed...)"
    )
    ready = serializers.CharField(allow_null=True, help_text="kubectl's READY: ready/total containers")
    restarts = serializers.IntegerField(help_text="kubectl's RESTARTS: the containers' restart counts summed")
    last_restart_at = serializers.DateTimeField(allow_null=True, help_text="when the last restarted run ended")
    created_at = serializers.DateTimeField(allow_null=True, help_text="the Pod's creationTimestamp (kubectl's AGE)")
    endpoint = serializers.CharField(allow_null=True, help_text="where the instance answers, once known")
    capacity_type = serializers.CharField(allow_null=True)
    region = serializers.CharField(allow_null=True)
    hourly_price = serializers.FloatField(allow_null=True, help_text="from the nebula.io/hourly-price annotation")
    pool = serializers.CharField(allow_null=True)
    provisioned_at = serializers.DateTimeField(allow_null=True, help_text="when the provider created the instance")
    wait_reason = serializers.CharField(
        allow_null=True,
        help_text="a gated Pod: the reason of placement's last Event (WaitingForCapacity, NoPool, BudgetExceeded...)",
    )
    waiting_for = serializers.CharField(allow_null=True, help_text="a gated Pod: what that Event says it waits for")
    served_here = serializers.BooleanField(
        allow_null=True,
        help_text="true: a virtual node of the replica answering tracks it; false: another replica serves it "
        "(read from the cluster); null: gated, no node yet",
    )


class ClaimSerializer(serializers.Serializer):
    claim = serializers.CharField()
    provider = serializers.CharField()
    instance_id = serializers.CharField()
    state = serializers.CharField()
    region = serializers.CharField(allow_null=True)
    capacity_type = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    pod = serializers.CharField(allow_null=True, help_text="namespace/name of the tracked Pod; null for an orphan")
    orphan = serializers.BooleanField()


class NodeSerializer(serializers.Serializer):
    name = serializers.CharField()
    provider = serializers.CharField()
    ready = serializers.BooleanField(allow_null=True, help_text="null until the first list")
    last_lease_renewal = serializers.DateTimeField(allow_null=True)
    capacity = serializers.DictField(child=serializers.CharField())
    last_list_error = serializers.CharField()
    last_list_seconds = serializers.FloatField(allow_null=True, help_text="null on a replica not serving the node")
    poll_interval = serializers.FloatField(allow_null=True, help_text="null on a replica not serving the node")
    pods = serializers.IntegerField()
    interruptions = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="instances the provider took back since this manager started, by the notice's kind "
        "(SpotInterruption, ScheduledMaintenance, InstanceStopping...; Reclaimed: seen only after the fact)",
    )
    interruption_tiers = serializers.DictField(
        child=serializers.IntegerField(), help_text="the same interruptions by tier (Spot, OnDemand, unknown)"
    )
    failures = serializers.DictField(
        child=serializers.IntegerField(), help_text="Pods whose own workload failed, by the Pod's reason"
    )
    unreachable_since = serializers.DateTimeField(
        allow_null=True, help_text="since when the provider does not answer; null while it answers"
    )
    unreachable_pods = serializers.IntegerField(
        help_text="Pods waiting on the unreachable provider (none is failed or killed for it); 0 while it answers"
    )
    served_here = serializers.BooleanField(
        help_text="false: another replica serves the node; this one reads it from its Node object, "
        "and knows neither list times nor how its instances ended"
    )


class PoolProviderSerializer(serializers.Serializer):
    name = serializers.CharField()
    regions = serializers.ListField(child=serializers.CharField())


class PoolSerializer(serializers.Serializer):
    name = serializers.CharField()
    valid = serializers.BooleanField()
    error = serializers.CharField()
    providers = PoolProviderSerializer(many=True)
    capacity_types = serializers.ListField(child=serializers.CharField())
    strategy = serializers.CharField(allow_null=True)
    blocklist_ttl_seconds = serializers.FloatField(allow_null=True)
    status = serializers.DictField()


class BlocklistFilterSerializer(serializers.Serializer):
    """Query parameters of GET /api/blocklist/, validated and bounded (I7)."""

    provider = serializers.CharField(required=False, max_length=63)
    scope = serializers.ChoiceField(required=False, choices=["provider", "tier", "offering"])
    pool = serializers.CharField(required=False, max_length=253)
