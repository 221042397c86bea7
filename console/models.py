"""The mirror's tables: what the manager held in memory at the last sync, for the console.

Written only by `console.mirror.Mirror` (one thread, one transaction per sync); read by the
admin and the dashboard. Nothing reads these rows back into memory (I6), and no column holds
an env value or a credential (I4). `mirror_key` names each table's natural key.
Tests: tests/console/test_console_admin.py.
"""

# mypy: disallow-subclassing-any=False

from __future__ import annotations

from django.db import models


class TrackedPod(models.Model):
    """A Pod a virtual node tracks, with the instance serving it; or one placement still holds
    gated (no provider, node or claim yet; reason SchedulingGated, and what it waits for)."""

    mirror_key = "uid"

    uid = models.CharField(max_length=64, unique=True)
    namespace = models.CharField(max_length=253, db_index=True)
    name = models.CharField(max_length=253, db_index=True)
    provider = models.CharField(max_length=63, db_index=True)
    node = models.CharField(max_length=80)
    claim = models.CharField(max_length=63, db_index=True)
    instance_id = models.CharField("instance id", max_length=255, blank=True, db_index=True)
    phase = models.CharField(max_length=20, blank=True, db_index=True)
    reason = models.CharField(max_length=80, blank=True)
    # kubectl's columns (kube.podstatus): the phase or a container's reason, ready/total, restarts.
    status = models.CharField(max_length=80, blank=True, db_index=True)
    ready = models.CharField(max_length=20, blank=True)
    restarts = models.IntegerField(default=0)
    last_restart_at = models.DateTimeField("last restart", null=True, blank=True)
    created_at = models.DateTimeField("created", null=True, blank=True)
    endpoint = models.CharField(max_length=255, blank=True)
    capacity_type = models.CharField("capacity type", max_length=20, blank=True)
    region = models.CharField(max_length=63, blank=True)
    hourly_price = models.FloatField("hourly price", null=True, blank=True)
    pool = models.CharField(max_length=63, blank=True)
    provisioned_at = models.DateTimeField("provisioned at", null=True, blank=True)
    wait_reason = models.CharField("waits (reason)", max_length=80, blank=True, db_index=True)
    waiting_for = models.CharField("waiting for", max_length=1000, blank=True)
    # True: a virtual node of this process tracks it; False: another replica's, read from the
    # cluster (console.clusterpods); None: gated, no node yet.
    served_here = models.BooleanField("served here", null=True)
    last_seen = models.DateTimeField("last seen", null=True, blank=True)

    class Meta:
        ordering = ["namespace", "name"]
        verbose_name = "tracked pod"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class InstanceClaim(models.Model):
    """An instance a provider's last list returned, and the Pod that claims it (or none: an orphan)."""

    mirror_key = "key"

    key = models.CharField(max_length=320, unique=True)  # provider/instance id
    provider = models.CharField(max_length=63, db_index=True)
    claim = models.CharField(max_length=63, db_index=True)
    instance_id = models.CharField("instance id", max_length=255, db_index=True)
    state = models.CharField(max_length=20, db_index=True)
    pod = models.CharField(max_length=507, blank=True, help_text="namespace/name; empty for an orphan")
    orphan = models.BooleanField(default=False, db_index=True)
    region = models.CharField(max_length=63, blank=True)
    capacity_type = models.CharField("capacity type", max_length=20, blank=True)
    created_at = models.DateTimeField("created at", null=True, blank=True)
    first_seen = models.DateTimeField("first seen", null=True, blank=True)
    last_seen = models.DateTimeField("last seen", null=True, blank=True)

    class Meta:
        ordering = ["provider", "claim"]
        verbose_name = "instance claim"

    def __str__(self) -> str:
        return f"{self.claim} ({self.instance_id})"


class BlocklistEntry(models.Model):
    """A blocked scope: placement skips it until it expires."""

    mirror_key = "entry_id"

    entry_id = models.CharField("entry", max_length=20, unique=True)
    provider = models.CharField(max_length=63, db_index=True)
    breadth = models.CharField(max_length=20, db_index=True)
    scope = models.CharField(max_length=255)
    tier = models.CharField(max_length=20, blank=True)
    accelerator = models.CharField(max_length=63, blank=True)
    region = models.CharField(max_length=63, blank=True)
    reason = models.CharField(max_length=1000, blank=True)
    pool = models.CharField(max_length=63, blank=True)
    recorded_at = models.DateTimeField("recorded")
    expires_at = models.DateTimeField("expires", db_index=True)

    class Meta:
        ordering = ["expires_at", "entry_id"]
        verbose_name = "blocklist entry"
        verbose_name_plural = "blocklist entries"

    def __str__(self) -> str:
        return f"{self.entry_id}: {self.scope}"


class VirtualNode(models.Model):
    """One virtual node (`nebula-<provider>`), how its provider answers, and how its instances
    ended: interrupted (by kind and tier), failed (by reason), unreachable (since, Pods waiting)."""

    mirror_key = "name"

    name = models.CharField(max_length=80, unique=True)
    provider = models.CharField(max_length=63, db_index=True)
    ready = models.BooleanField(null=True)
    last_lease_renewal = models.DateTimeField("last lease renewal", null=True, blank=True)
    capacity = models.JSONField(default=dict)
    pods = models.IntegerField(default=0)
    # Known only to the replica serving the node: None on the others.
    poll_interval = models.FloatField("poll interval (s)", null=True, blank=True)
    last_list_seconds = models.FloatField("last list (s)", null=True, blank=True)
    last_list_error = models.CharField("last list error", max_length=1000, blank=True)
    # How its instances ended since the manager started (console.ends): the three causes apart.
    interruptions = models.JSONField(default=dict, help_text="taken back by the provider, by the notice's kind")
    interruption_tiers = models.JSONField("interruptions by tier", default=dict)
    failures = models.JSONField(default=dict, help_text="Pods whose workload failed, by the Pod's reason")
    unreachable_since = models.DateTimeField("unreachable since", null=True, blank=True)
    unreachable_pods = models.IntegerField("Pods waiting (unreachable)", default=0)
    served_here = models.BooleanField("served here", default=True)  # False: another replica's, from its Node

    class Meta:
        ordering = ["name"]
        verbose_name = "virtual node"

    def __str__(self) -> str:
        return str(self.name)


class RecentEvent(models.Model):
    """One of the latest Events the manager wrote (a bounded window, newest kept): one row per
    Event object, its repeats counted (`count`, `first_at`, `at` the last), as kubectl shows it."""

    mirror_key = "key"

    key = models.CharField(max_length=507, unique=True)  # the Event's namespace/name
    seq = models.BigIntegerField(db_index=True)  # order of the last write: newest first
    count = models.IntegerField(default=1)
    first_at = models.DateTimeField("first seen", null=True, blank=True)
    at = models.DateTimeField("last seen", db_index=True)
    kind = models.CharField(max_length=20)
    namespace = models.CharField(max_length=253, blank=True)
    name = models.CharField(max_length=253)
    type = models.CharField(max_length=20)
    reason = models.CharField(max_length=80)
    message = models.CharField(max_length=1000)

    class Meta:
        ordering = ["-seq"]
        verbose_name = "recent event"

    def __str__(self) -> str:
        return f"{self.reason} {self.kind} {self.namespace}/{self.name}"
