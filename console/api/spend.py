"""GET /api/spend/: placement's spend report (pools against their budgets, the dearest Pods
now, the hourly and daily buckets by provider) and its shapes, documented in /api/schema/.

Mounted by `console.api.urls`; read through `console.runtime.Runtime.spend_report` (placement's
`spend_report()`), never computed here. One bounded object, not a paginated list: at most
`MAX_POOLS` pools, `spendpage.MAX_TOP_PODS` Pods, 24 hourly and 30 daily buckets each. An
unknown amount is `unknown: true` with its `text` "unknown", never a bare 0.
Tests: tests/console/api/test_api_spend.py::test_the_report_is_served_with_unknown_amounts_marked.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from console import kubeauth, runtime, spendpage
from console.api.views import NebulaAccess
from kube.reviews import Access
from placement.spend import DAYS_SHOWN, HOURS_SHOWN
from placement.spendview import SpendReport

MAX_POOLS = 1000


class MoneySerializer(serializers.Serializer):
    dollars = serializers.FloatField(help_text="dollars of the priced part")
    unpriced_seconds = serializers.FloatField(help_text="seconds billed by instances without a known price")
    unknown = serializers.BooleanField(help_text="true: nothing priced and something unpriced billed")
    text = serializers.CharField(help_text='"$12.34", "$12.34 + unpriced" or "unknown"')


class RateSerializer(serializers.Serializer):
    dollars = serializers.FloatField(help_text="dollars an hour of what bills now or is reserved")
    unpriced = serializers.IntegerField(help_text="billing instances without a known price")
    text = serializers.CharField(help_text='"$19.20/h", "$19.20/h + 2 unpriced" or "unknown"')


class BucketSerializer(serializers.Serializer):
    start = serializers.DateTimeField(help_text="the hour's or UTC day's start")
    total = serializers.FloatField()
    by_provider = serializers.DictField(child=serializers.FloatField())


class BudgetSerializer(serializers.Serializer):
    max_hourly_cost = serializers.FloatField(allow_null=True)
    daily = serializers.FloatField(allow_null=True)
    monthly = serializers.FloatField(allow_null=True)
    max_instances = serializers.IntegerField(allow_null=True)
    on_exceeded = serializers.ChoiceField(choices=["Hold", "Stop"])
    allow_unpriced = serializers.BooleanField()
    text = serializers.CharField(help_text='kubectl\'s BUDGET column: "$20.00/h, $300.00/day"')


class PoolSpendSerializer(serializers.Serializer):
    pool = serializers.CharField()
    rate = RateSerializer()
    instances = serializers.IntegerField(help_text="placed Pods not finished (what maxInstances counts)")
    today = MoneySerializer(help_text="the current UTC day")
    month = MoneySerializer(help_text="the current UTC calendar month")
    total = MoneySerializer(help_text="since the pool began, deleted Pods included")
    budget = BudgetSerializer(allow_null=True, help_text="null: the pool has no spec.budget")
    exceeded = serializers.CharField(
        allow_null=True, help_text="the BudgetExceeded message while a budget holds new Pods back; null otherwise"
    )
    hours = BucketSerializer(many=True, help_text="the last 24 hours, oldest first")
    days = BucketSerializer(many=True, help_text="the last 30 UTC days, oldest first")


class PodSpendSerializer(serializers.Serializer):
    namespace = serializers.CharField()
    name = serializers.CharField()
    pool = serializers.CharField(allow_null=True)
    provider = serializers.CharField(allow_null=True)
    hourly_price = serializers.FloatField(allow_null=True, help_text="null: unknown (never 0 for unknown)")
    billing = serializers.BooleanField(help_text="its instance bills now")
    total = MoneySerializer()


class SpendReportSerializer(serializers.Serializer):
    running = serializers.BooleanField(help_text="false: placement does not run in this process (empty report)")
    at = serializers.DateTimeField()
    pool_count = serializers.IntegerField(help_text=f"pools in the report; at most {MAX_POOLS} are listed")
    pools = PoolSpendSerializer(many=True)
    top_pods = PodSpendSerializer(many=True, help_text=f"billing Pods, dearest first, at most {spendpage.MAX_TOP_PODS}")
    providers_hours = BucketSerializer(many=True, help_text="every pool together by provider, last 24 hours")
    providers_days = BucketSerializer(many=True, help_text="every pool together by provider, last 30 UTC days")


def bounded(report: SpendReport | None) -> dict[str, Any]:
    """The report as the API returns it, every list cut to its bound."""
    seen = spendpage.shown(report)
    return {
        "running": report is not None,
        "at": seen.at,
        "pool_count": len(seen.pools),
        "pools": [replace(p, hours=p.hours[-HOURS_SHOWN:], days=p.days[-DAYS_SHOWN:]) for p in seen.pools[:MAX_POOLS]],
        "top_pods": seen.top_pods[: spendpage.MAX_TOP_PODS],
        "providers_hours": seen.providers_hours[-HOURS_SHOWN:],
        "providers_days": seen.providers_days[-DAYS_SHOWN:],
    }


class SpendView(APIView):
    """Spend and budgets as of now: per pool, the dearest Pods, and the chart buckets."""

    permission_classes = [NebulaAccess]

    def access(self) -> Access:
        return kubeauth.read_access("spend")

    @extend_schema(responses=SpendReportSerializer)
    def get(self, request: Request) -> Response:
        return Response(SpendReportSerializer(bounded(runtime.current().spend_report())).data)
