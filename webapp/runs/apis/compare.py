"""Comparing runs: Fig. 2's series, the benchmark table, the differing config fields and the deltas against a
baseline."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.views import APIView

from webapp.accounts.permissions import acting_user
from webapp.core.api import error_responses, query_once
from webapp.core.responses import cached_json

from .. import selectors
from ..outputs import ComparisonOutputSerializer

# -- comparing runs ----------------------------------------------------------------------------------------------


class CompareApi(APIView):
    class CompareInput(serializers.Serializer[Any]):
        runs = serializers.ListField(
            child=serializers.UUIDField(),
            min_length=1,
            max_length=selectors.MAX_COMPARED_RUNS,
            help_text="Run ids: repeat the parameter (runs=a&runs=b) or separate them with commas.",
        )
        baseline = serializers.UUIDField(required=False, help_text="One of `runs`: deltas are against it.")
        metric = serializers.ChoiceField(
            choices=selectors.BENCHMARK_METRICS,
            default="em",
            help_text="The benchmark metric of the table.",
            error_messages={
                "invalid_choice": f"unknown metric {{input!r}}; choose one of {', '.join(selectors.BENCHMARK_METRICS)}"
            },
        )

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            if "baseline" in attrs and attrs["baseline"] not in attrs["runs"]:
                raise serializers.ValidationError({"baseline": ["must be one of the compared runs"]})
            return attrs

    @extend_schema(
        parameters=[CompareInput],
        responses={200: ComparisonOutputSerializer, **error_responses(400, 404)},
        operation_id="runs_compare",
        description="Fig. 2 series, the benchmark table (best per column, each cell's questions, and per column "
        "whether its runs were scored on the same questions), the differing config fields and deltas against a "
        "baseline on the questions both scored, for up to 12 runs. Once none of the runs is active the answer is "
        "cached until one of them changes, is renamed, tagged or evaluated again.",
    )
    def get(self, request: Request) -> HttpResponse:
        user = acting_user(request)
        query = query_once(request.query_params, many={"runs"})
        ids = [part for value in query.get("runs", []) for part in value.split(",") if part]
        data = self.CompareInput(data={**query, "runs": ids})
        data.is_valid(raise_exception=True)
        values = data.validated_data
        runs = selectors.runs_get(user=user, run_ids=values["runs"])
        baseline = next((run for run in runs if run.pk == values.get("baseline")), None)
        metric = values["metric"]
        versions = selectors.evaluation_versions(runs)  # read once: the cache key and a new comparison need them
        # Sent as the selector makes it: the serializer documents it, but would copy every number of the series one
        # field call at a time (a test holds the two to the same answer).
        return cached_json(
            request,
            selectors.comparison_cache_key(runs=runs, metric=metric, baseline=baseline, versions=versions),
            lambda: selectors.run_compare(runs=runs, metric=metric, baseline=baseline, versions=versions),
        )
