"""Limit/offset pagination with a ceiling, so no query can ask for an unbounded page (I7).

Tests: tests/console/api/test_api.py.
"""

from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    default_limit = 100
    max_limit = 1000
