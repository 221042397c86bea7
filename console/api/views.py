"""The REST API's viewsets: paginated read-only lists over `console.runtime`, projected by
`console.rows` (the mirror's projection too), and DELETE of a blocklist entry (staff, or a
Kubernetes identity RBAC lets `clear` it; logged and recorded as an Event by placement).

Authentication and pagination come from settings.REST_FRAMEWORK; no view is anonymous. A
Django user reads while logged in (staff may clear); a Kubernetes identity (a bearer token or
a token login) is asked of RBAC per request: `get` on nebula.io/<resource> to read, `clear` on
nebula.io/blocklist named by the entry id to clear (`NebulaAccess`).
Tests: tests/console/api/test_api.py.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, permissions, status, viewsets
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from console import kubeauth, rows, runtime
from console.api import serializers
from console.observer import installed as installed_observer
from kube.reviews import Access

logger = logging.getLogger(__name__)

ENTRY_ID = r"b[0-9]{1,12}"


class NebulaAccess(permissions.BasePermission):
    """Django users: logged in to read, staff to clear. Kubernetes identities: the view's
    `access` asked of RBAC (403 naming the missing permission; 503 if it cannot be asked)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        access = view.access()
        kube_user = kubeauth.kube_user_of(request)
        if kube_user is None:
            return access.verb == "get" or bool(request.user.is_staff)
        try:
            allowed = kubeauth.allows(kube_user, access)
        except kubeauth.ReviewFailed as err:
            raise kubeauth.ReviewUnavailable(f"{err}; try again.") from None
        if not allowed:
            self.message = kubeauth.denial(kube_user, access)
        return allowed


class _ListView(mixins.ListModelMixin, viewsets.GenericViewSet):
    """A paginated list of rows computed from memory on each request."""

    permission_classes = [NebulaAccess]
    resource = ""  # the nebula.io resource RBAC names for this endpoint

    def get_queryset(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def access(self) -> Access:
        return kubeauth.read_access(self.resource, str(self.kwargs.get("pk", "")))


class PodViewSet(_ListView):
    """Pods the virtual nodes track, with the instance serving each (those of nodes another
    replica serves as the cluster shows them), and the Pods placement still holds gated, with
    what each waits for."""

    resource = "pods"
    serializer_class = serializers.PodSerializer

    def get_queryset(self) -> list[dict[str, Any]]:
        current = runtime.current()
        return rows.pod_rows(current.handlers, current.placement, current.cluster)


class ClaimViewSet(_ListView):
    """Instances seen by each provider's last list, orphans (no Pod claims them) included."""

    resource = "claims"
    serializer_class = serializers.ClaimSerializer

    def get_queryset(self) -> list[dict[str, Any]]:
        return rows.all_claim_rows(runtime.current().handlers)


class NodeViewSet(_ListView):
    """The virtual nodes, one per provider (those another replica serves from their Node
    objects), and whether their provider answers."""

    resource = "nodes"
    serializer_class = serializers.NodeSerializer

    def get_queryset(self) -> list[dict[str, Any]]:
        current = runtime.current()
        return rows.node_rows(current.handlers, installed_observer(), current.cluster)


class PoolViewSet(_ListView):
    """NodePools as placement last saw them, the invalid ones with the reason."""

    resource = "pools"
    serializer_class = serializers.PoolSerializer

    def get_queryset(self) -> list[dict[str, Any]]:
        placement = runtime.current().placement
        return [] if placement is None else [rows.pool_row(state) for state in placement.pools.pools()]


class BlocklistViewSet(_ListView, mixins.RetrieveModelMixin, mixins.DestroyModelMixin):
    """Blocked scopes, soonest expiry first, each with the seconds it has left."""

    resource = "blocklist"
    serializer_class = serializers.BlockEntrySerializer
    lookup_value_regex = ENTRY_ID

    def access(self) -> Access:
        if self.action == "destroy":
            return kubeauth.clear_access(str(self.kwargs.get("pk", "")))
        return super().access()

    def get_queryset(self) -> list[dict[str, Any]]:
        blocklist = runtime.current().blocklist
        if blocklist is None:
            return []
        query = serializers.BlocklistFilterSerializer(data=self.request.query_params)
        if not query.is_valid():
            raise ValidationError(query.errors)
        wanted = query.validated_data
        entries = [rows.block_row(e) for e in blocklist.entries()]
        return [
            row
            for row in entries
            if row["provider"] == wanted.get("provider", row["provider"])
            and row["breadth"] == wanted.get("scope", row["breadth"])
            and row["pool"] == wanted.get("pool", row["pool"])
        ]

    @extend_schema(
        parameters=[
            OpenApiParameter("provider", OpenApiTypes.STR, description="only this provider's entries"),
            OpenApiParameter("scope", OpenApiTypes.STR, enum=["provider", "tier", "offering"]),
            OpenApiParameter("pool", OpenApiTypes.STR, description="only entries recorded for this NodePool"),
        ]
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        entry = self._entry(str(kwargs.get("pk", "")))
        return Response(self.get_serializer(rows.block_row(entry)).data)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Clear one entry now (staff, or RBAC's `clear`): placement may use the scope again at once."""
        entry_id = str(kwargs.get("pk", ""))
        self._entry(entry_id)
        kube_user = kubeauth.kube_user_of(request)
        actor = kube_user.name if kube_user is not None else request.user.get_username()
        if not runtime.current().clear_block(entry_id, actor=actor):
            raise NotFound(f"no blocklist entry {entry_id}")
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _entry(self, entry_id: str) -> Any:
        blocklist = runtime.current().blocklist
        entry = None if blocklist is None or not re.fullmatch(ENTRY_ID, entry_id) else blocklist.get(entry_id)
        if entry is None:
            raise NotFound(f"no blocklist entry {entry_id}; it may have expired")
        return entry
