"""The REST API's viewsets: paginated read-only lists over `console.runtime`, projected by
`console.rows` (the mirror's projection too), and DELETE of a blocklist entry (staff only,
logged and recorded as an Event by placement).

Authentication and pagination come from settings.REST_FRAMEWORK; no view is anonymous.
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

from console import rows, runtime
from console.api import serializers
from console.observer import installed as installed_observer

logger = logging.getLogger(__name__)

ENTRY_ID = r"b[0-9]{1,12}"


class _ListView(mixins.ListModelMixin, viewsets.GenericViewSet):
    """A paginated list of rows computed from memory on each request."""

    def get_queryset(self) -> list[dict[str, Any]]:
        raise NotImplementedError


class PodViewSet(_ListView):
    """Pods the virtual nodes track, with the instance serving each, and the Pods placement
    still holds gated, with what each waits for."""

    serializer_class = serializers.PodSerializer

    def get_queryset(self) -> list[dict[str, Any]]:
        current = runtime.current()
        return rows.pod_rows(current.handlers, current.placement)


class ClaimViewSet(_ListView):
    """Instances seen by each provider's last list, orphans (no Pod claims them) included."""

    serializer_class = serializers.ClaimSerializer

    def get_queryset(self) -> list[dict[str, Any]]:
        return rows.all_claim_rows(runtime.current().handlers)


class NodeViewSet(_ListView):
    """The virtual nodes, one per provider, and whether their provider answers."""

    serializer_class = serializers.NodeSerializer

    def get_queryset(self) -> list[dict[str, Any]]:
        return rows.node_rows(runtime.current().handlers, installed_observer())


class PoolViewSet(_ListView):
    """NodePools as placement last saw them, the invalid ones with the reason."""

    serializer_class = serializers.PoolSerializer

    def get_queryset(self) -> list[dict[str, Any]]:
        placement = runtime.current().placement
        return [] if placement is None else [rows.pool_row(state) for state in placement.pools.pools()]


class BlocklistViewSet(_ListView, mixins.RetrieveModelMixin, mixins.DestroyModelMixin):
    """Blocked scopes, soonest expiry first, each with the seconds it has left."""

    serializer_class = serializers.BlockEntrySerializer
    lookup_value_regex = ENTRY_ID

    def get_permissions(self) -> list[permissions.BasePermission]:
        if self.action == "destroy":
            return [permissions.IsAuthenticated(), permissions.IsAdminUser()]
        return [permissions.IsAuthenticated()]

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
        """Clear one entry now (staff only): placement may use the scope again at once."""
        entry_id = str(kwargs.get("pk", ""))
        self._entry(entry_id)
        if not runtime.current().clear_block(entry_id, actor=request.user.get_username()):
            raise NotFound(f"no blocklist entry {entry_id}")
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _entry(self, entry_id: str) -> Any:
        blocklist = runtime.current().blocklist
        entry = None if blocklist is None or not re.fullmatch(ENTRY_ID, entry_id) else blocklist.get(entry_id)
        if entry is None:
            raise NotFound(f"no blocklist entry {entry_id}; it may have expired")
        return entry
