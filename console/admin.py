"""The admin over the mirror: every table read-only for staff, with filters, search and links
between a Pod, its claim and its node; and the one operator action, clearing a blocklist entry.

Nothing here writes the mirror (only `console.mirror` does). The clear action is staff-only
(for a token login: RBAC's `clear` on nebula.io/blocklist named by the entry id), POST with a
CSRF token after a confirmation page, and audited three ways with the actor's name (the
Kubernetes user's for a token login): the admin's LogEntry, a log line, and (through
placement) an Event on the provider's node. The login page takes a Kubernetes token too
(`console.kubelogin.LoginForm`).
Tests: tests/console/test_console_admin.py.
"""

# mypy: disallow-subclassing-any=False, disallow-untyped-decorators=False

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.models import DELETION, LogEntry
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.views.decorators.http import require_http_methods

from console import cells, kubeauth, kubelogin, models, runtime

logger = logging.getLogger(__name__)

admin.site.site_header = "Nebula console"
admin.site.site_title = "Nebula"
admin.site.index_title = "The manager's memory, mirrored"
admin.site.enable_nav_sidebar = False  # the mirror's lists are wide; they need the room
admin.site.login_form = kubelogin.LoginForm  # a username and password, or a Kubernetes token
ENTRY_ID = re.compile(r"b[0-9]{1,12}")


def changelist_link(model: type[Any], text: str, **query: str) -> str:
    """A link to `model`'s admin list filtered by `query` (exact matches on its own columns)."""
    url = reverse(f"admin:console_{model._meta.model_name}_changelist")
    return str(format_html('<a href="{}?{}">{}</a>', url, urlencode(query), text))


class ReadOnlyAdmin(admin.ModelAdmin):
    """No add, change or delete for anyone (superusers included), no bulk actions; staff may view."""

    actions = None
    list_per_page = 50
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_staff)


@admin.register(models.TrackedPod)
class TrackedPodAdmin(ReadOnlyAdmin):
    """kubectl's columns first (STATUS, READY, RESTARTS, AGE), then where the Pod runs."""

    # What fits 1,280 pixels: the claim, provisioned and last-seen times are on each Pod's page
    # (the instance id links to its claim).
    list_display = ["pod", "status_cell", "ready", "restarts_cell", "age", "node_link", "instance_link", "tier"]
    list_display += ["region", "pool", "price", "waits"]
    list_filter = ["provider", "status", "phase", "wait_reason", "capacity_type", "namespace"]
    search_fields = ["name", "namespace", "claim", "instance_id", "uid"]
    ordering = ["namespace", "name"]

    @admin.display(description="pod", ordering="name")
    def pod(self, obj: models.TrackedPod) -> str:
        return cells.cut(f"{obj.namespace}/{obj.name}")

    @admin.display(description="status", ordering="status")
    def status_cell(self, obj: models.TrackedPod) -> str:
        return cells.status_cell(obj.status or obj.phase)

    @admin.display(description="restarts", ordering="restarts")
    def restarts_cell(self, obj: models.TrackedPod) -> str:
        return cells.restarts_text(obj.restarts, obj.last_restart_at, datetime.now(UTC))

    @admin.display(description="age", ordering="-created_at")
    def age(self, obj: models.TrackedPod) -> str:
        return cells.age_text(obj.created_at, datetime.now(UTC))

    @admin.display(description="tier", ordering="capacity_type")
    def tier(self, obj: models.TrackedPod) -> str:
        return obj.capacity_type or "-"

    @admin.display(description="$/h", ordering="hourly_price")
    def price(self, obj: models.TrackedPod) -> str:
        return "-" if obj.hourly_price is None else f"{obj.hourly_price:.2f}"

    @admin.display(description="waits", ordering="wait_reason")
    def waits(self, obj: models.TrackedPod) -> str:
        return obj.wait_reason or "-"

    @admin.display(description="node", ordering="node")
    def node_link(self, obj: models.TrackedPod) -> str:
        if not obj.node:
            return "-"  # gated: not on a node yet
        return changelist_link(models.VirtualNode, obj.node, name=obj.node)

    @admin.display(description="claim", ordering="claim")
    def claim_link(self, obj: models.TrackedPod) -> str:
        if not obj.claim:
            return "-"
        return changelist_link(models.InstanceClaim, cells.cut(obj.claim, 24), claim=obj.claim)

    @admin.display(description="instance id", ordering="instance_id")
    def instance_link(self, obj: models.TrackedPod) -> str:
        if not obj.instance_id:
            return "-"
        return changelist_link(models.InstanceClaim, cells.cut(obj.instance_id, 24), instance_id=obj.instance_id)


@admin.register(models.InstanceClaim)
class InstanceClaimAdmin(ReadOnlyAdmin):
    """An orphan is the one bad state here: its pod cell says so (marked); a claimed instance
    carries no mark at all (no red "not an orphan")."""

    # What fits 1,280 pixels: first and last seen are on each claim's page.
    list_display = ["claim_cell", "instance_cell", "provider", "state", "pod_link", "region", "tier", "created_at"]
    list_filter = ["provider", "state", "orphan"]
    search_fields = ["claim", "instance_id", "pod"]
    ordering = ["provider", "claim"]

    @admin.display(description="claim", ordering="claim")
    def claim_cell(self, obj: models.InstanceClaim) -> str:
        return cells.cut(obj.claim, 30)

    @admin.display(description="tier", ordering="capacity_type")
    def tier(self, obj: models.InstanceClaim) -> str:
        return obj.capacity_type or "-"

    @admin.display(description="instance id", ordering="instance_id")
    def instance_cell(self, obj: models.InstanceClaim) -> str:
        return cells.cut(obj.instance_id, 24)

    @admin.display(description="pod", ordering="pod")
    def pod_link(self, obj: models.InstanceClaim) -> str:
        if obj.orphan:
            return str(format_html('<strong class="orphan bad">{}</strong>', "orphan"))
        return changelist_link(models.TrackedPod, cells.cut(obj.pod, 36), claim=obj.claim)


@admin.register(models.VirtualNode)
class VirtualNodeAdmin(ReadOnlyAdmin):
    list_display = ["name", "ready", "pods_link", "claims_link", "last_lease_renewal", "last_list_seconds"]
    list_display += ["last_list_error_cell", "poll_interval"]
    list_filter = ["provider", "ready"]
    search_fields = ["name", "provider"]
    ordering = ["name"]

    @admin.display(description="pods", ordering="pods")
    def pods_link(self, obj: models.VirtualNode) -> str:
        return changelist_link(models.TrackedPod, str(obj.pods), provider=obj.provider)

    @admin.display(description="last list error")
    def last_list_error_cell(self, obj: models.VirtualNode) -> str:
        return cells.words(obj.last_list_error) or "-"

    @admin.display(description="instances")
    def claims_link(self, obj: models.VirtualNode) -> str:
        return changelist_link(models.InstanceClaim, "instances", provider=obj.provider)


@admin.register(models.BlocklistEntry)
class BlocklistEntryAdmin(ReadOnlyAdmin):
    list_display = [
        "entry_id",
        "provider",
        "scope_cell",
        "reason_cell",
        "pool",
        "recorded_at",
        "expires_at",
        "time_left",
    ]
    list_display += ["clear_link"]
    list_filter = ["provider", "breadth", "pool"]
    search_fields = ["entry_id", "scope", "reason", "pool"]
    ordering = ["expires_at", "entry_id"]

    @admin.display(description="scope", ordering="scope")
    def scope_cell(self, obj: models.BlocklistEntry) -> str:
        return cells.words(obj.scope)

    @admin.display(description="reason", ordering="reason")
    def reason_cell(self, obj: models.BlocklistEntry) -> str:
        return cells.words(obj.reason)

    @admin.display(description="time left", ordering="expires_at")
    def time_left(self, obj: models.BlocklistEntry) -> str:
        return seconds_text((obj.expires_at - datetime.now(UTC)).total_seconds())

    @admin.display(description="operator action")
    def clear_link(self, obj: models.BlocklistEntry) -> str:
        url = reverse("admin:console_blocklistentry_clear", args=[obj.entry_id])
        return str(format_html('<a class="button" href="{}">Clear…</a>', url))

    def get_urls(self) -> list[URLPattern]:
        clear = self.admin_site.admin_view(require_http_methods(["GET", "POST"])(self.clear_view))
        return [path("<str:entry_id>/clear/", clear, name="console_blocklistentry_clear"), *super().get_urls()]

    def clear_view(self, request: HttpRequest, entry_id: str) -> HttpResponse:
        """GET: a confirmation page. POST (CSRF-checked by the middleware): clear the entry in
        memory, audit it, back to the list. Staff only (admin_view requires staff); a token
        login also needs RBAC's `clear` on this entry."""
        if not request.user.is_staff or not ENTRY_ID.fullmatch(entry_id):
            raise Http404("no such blocklist entry")
        kube_user = kubeauth.session_user(request)
        if kube_user is not None:
            try:
                allowed = kubeauth.allows(kube_user, kubeauth.clear_access(entry_id))
            except kubeauth.ReviewFailed as err:
                return HttpResponse(f"{err}; try again.\n", status=503, content_type="text/plain")
            if not allowed:
                raise PermissionDenied(kubeauth.denial(kube_user, kubeauth.clear_access(entry_id)))
        row = models.BlocklistEntry.objects.filter(entry_id=entry_id).first()
        current = runtime.current()
        live = current.blocklist.get(entry_id) if current.blocklist is not None else None
        changelist = reverse("admin:console_blocklistentry_changelist")
        if request.method == "GET":
            context = dict(
                self.admin_site.each_context(request),
                title=f"Clear blocklist entry {entry_id}?",
                entry_id=entry_id,
                row=row,
                live=live,
                opts=self.model._meta,
                changelist=changelist,
            )
            return TemplateResponse(request, "admin/console/blocklistentry/clear_confirmation.html", context)
        actor = kube_user.name if kube_user is not None else request.user.get_username()
        if not current.clear_block(entry_id, actor=actor):
            gone = f"Blocklist entry {entry_id} is gone already (expired or cleared)."
            self.message_user(request, gone, messages.WARNING)
            return HttpResponseRedirect(changelist)
        if row is not None:
            LogEntry.objects.log_actions(
                user_id=request.user.pk,
                queryset=[row],
                action_flag=DELETION,
                change_message=f"cleared blocklist entry {entry_id} ({row.scope}) in memory, by {actor}",
                single_object=True,
            )
        self.message_user(request, f"Blocklist entry {entry_id} cleared; placement may use that scope again.")
        return HttpResponseRedirect(changelist)


@admin.register(models.RecentEvent)
class RecentEventAdmin(ReadOnlyAdmin):
    """One row per Event object, as `kubectl get events` shows it: last seen, type, reason,
    object, count, message (a repeat updates the row)."""

    list_display = ["at", "type_cell", "reason", "subject", "count", "message_cell"]
    list_filter = ["type", "kind", "reason"]
    search_fields = ["name", "namespace", "reason", "message"]
    ordering = ["-seq"]

    @admin.display(description="type", ordering="type")
    def type_cell(self, obj: models.RecentEvent) -> str:
        return str(format_html('<span class="warning">{}</span>', obj.type)) if obj.type == "Warning" else obj.type

    @admin.display(description="message")
    def message_cell(self, obj: models.RecentEvent) -> str:
        return cells.words(obj.message)

    @admin.display(description="object")
    def subject(self, obj: models.RecentEvent) -> str:
        return cells.cut(obj.name if obj.kind == "Node" else f"{obj.namespace}/{obj.name}")


def seconds_text(seconds: float) -> str:
    """`4m 05s`, `59s`, `expired`: how a person reads a countdown."""
    if seconds <= 0:
        return "expired"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"
