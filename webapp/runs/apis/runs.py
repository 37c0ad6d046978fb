"""The runs API: list the caller's teams' runs a page at a time, submit one, and read one run's data (detail,
metrics, lineage, evaluations, Table 1, trajectories, checkpoints, diversity, population), every read the same
shape (`RunReadApi`)."""

from __future__ import annotations

import hashlib
from typing import Any

from django.http import HttpResponse
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.accounts.models import Team, User
from webapp.accounts.permissions import acting_user
from webapp.accounts.selectors import team_for_submission
from webapp.core.api import ConfigField, PagePagination, error_responses, query_once
from webapp.core.responses import cached_json, json_bytes
from webapp.data import leakage

from .. import selectors, services
from ..configs import PRESET_NAMES
from ..models import Run
from ..outputs import (
    CheckpointOutputSerializer,
    DiversityOutputSerializer,
    EvaluationsOutputSerializer,
    LineageOutputSerializer,
    MetricSeriesOutputSerializer,
    PopulationOutputSerializer,
    RunDetailOutputSerializer,
    RunOutputSerializer,
    RunTableOutputSerializer,
    TrajectoryPageOutputSerializer,
)

TagsField = serializers.ListField(child=serializers.CharField(max_length=64), max_length=20, required=False)
"""A run's tags, as a submission and a clone take them."""


class RunListCreateApi(APIView):
    pagination_class = PagePagination

    class RunListFilter(serializers.Serializer[Any]):
        status = serializers.ChoiceField(choices=Run.Status.choices, required=False)
        tag = serializers.CharField(max_length=64, required=False, trim_whitespace=False)
        creator = serializers.CharField(max_length=150, required=False, trim_whitespace=False)
        team = serializers.SlugField(required=False)
        preset = serializers.ChoiceField(choices=PRESET_NAMES, required=False)
        ordering = serializers.ChoiceField(choices=selectors.RUN_ORDERINGS, required=False)

    class RunCreateInput(serializers.Serializer[Any]):
        team = serializers.SlugField(required=False, help_text="Team slug; optional when you are in one team.")
        name = serializers.CharField(max_length=200)
        tags = TagsField
        preset = serializers.ChoiceField(choices=PRESET_NAMES, required=False, help_text="Start from this preset.")
        config = ConfigField(required=False, help_text="A partial engine config merged over the preset.")
        overrides = ConfigField(required=False, help_text='Field overrides: {"grpo.lr": 1e-6, "evolve_every": 10}.')

    @extend_schema(
        parameters=[RunListFilter, PagePagination.Input],
        responses={200: RunOutputSerializer(many=True), **error_responses(400, 404)},
        operation_id="runs_list",
        description="The runs of your teams, a page at a time: `count` runs in all, the addresses of the `next` and "
        "`previous` pages (null at either end), and this page's `results`. A page past the last is a 404.",
    )
    def get(self, request: Request) -> Response:
        user = acting_user(request)
        query = query_once(request.query_params)
        filters = self.RunListFilter(data=query)
        filters.is_valid(raise_exception=True)
        self.pagination_class.Input(data=query).is_valid(raise_exception=True)
        runs = selectors.run_list(user=user, **filters.validated_data)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(runs, request, view=self)
        return paginator.get_paginated_response(RunOutputSerializer(page, many=True).data)

    @extend_schema(
        request=RunCreateInput,
        responses={201: RunOutputSerializer, **error_responses(400, 403, 413)},
        operation_id="runs_create",
        description="Queue a run: a preset, a partial config and overrides, validated by the engine (400 names each "
        "bad field); 403 for a viewer, 429 when the team is at its active-run quota.",
    )
    def post(self, request: Request) -> Response:
        user = acting_user(request)
        data = self.RunCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        run = services.run_submit(
            team=_submission_team(user, values.get("team")),
            user=user,
            name=values["name"],
            preset=values.get("preset", ""),
            config=values.get("config"),
            overrides=values.get("overrides"),
            tags=values.get("tags", []),
        )
        return Response(RunOutputSerializer(run).data, status=201)


def _submission_team(user: User, slug: str | None) -> Team:
    return team_for_submission(user=user, slug=slug)


# -- one run's data: every read has this shape --------------------------------------------------------------------


class RunReadApi(APIView):
    """GET a run of the caller's teams (another team's run is a 404, as is one that does not exist) and send what
    `read` makes of it through `output`. A subclass names both (and `query`, a serializer of its query parameters,
    when it takes any) and documents them with `extend_schema`. Every answer carries an ETag: a poll whose
    If-None-Match still matches gets a body-less 304."""

    output: type[serializers.Serializer[Any]]
    many = False
    query: type[serializers.Serializer[Any]] | None = None
    cache_name: str | None = None
    """Set where what `read` makes of a run changes only while the run is active: a settled run's answer is then
    rendered once and served from the cache (`selectors.run_cache_key`), and its ETag is known before anything is
    read. Only for views without query parameters."""
    columns = False
    """Set where `read` returns columns of plain numbers that `output` documents but would only copy, one field call
    per number (tests hold the two to the same answer): they are sent as `read` returns them."""
    related = True
    """Unset where `read` needs only the run's own row, not its team, creator, best instruction or tags."""

    def read(self, run: Run, **query: Any) -> Any:
        raise NotImplementedError

    def cache_key(self, run: Run) -> str | None:
        """The key a settled run's answer is cached under (see `cache_name`); None: built on every read."""
        return selectors.run_cache_key(run=run, name=self.cache_name) if self.cache_name is not None else None

    def render(self, run: Run, **query: Any) -> Any:
        data = self.read(run, **query)
        return data if self.columns else self.output(data, many=self.many).data

    def get(self, request: Request, run_id: str) -> HttpResponse:
        user = acting_user(request)
        params: dict[str, Any] = {}
        if self.query is not None:
            filters = self.query(data=query_once(request.query_params))
            filters.is_valid(raise_exception=True)
            params = dict(filters.validated_data)
        run = selectors.run_get(user=user, run_id=run_id, related=self.related)
        return cached_json(request, self.cache_key(run), lambda: self.render(run, **params))


@extend_schema_view(
    get=extend_schema(
        responses={200: RunDetailOutputSerializer, **error_responses(404)},
        operation_id="runs_retrieve",
        description="The run, and what its config changed from its preset.",
    )
)
class RunDetailApi(RunReadApi):
    output = RunDetailOutputSerializer

    def read(self, run: Run, **query: Any) -> Any:
        return run

    def cache_key(self, run: Run) -> str | None:
        """A settled run's detail still changes with what can be edited or happen after it settled (its name, tags,
        creator's and team's names, and an evaluation requested of its checkpoints): their digest is in the key."""
        edits = [
            run.name,
            sorted(tag.name for tag in run.tags.all()),  # prefetched with the run
            run.team.slug,
            run.creator.username if run.creator else None,
            run.best_instruction_id,
            run.error,
            run.heartbeat_at,
            run.evaluation_progress,
        ]
        digest = hashlib.blake2b(json_bytes(edits), digest_size=8).hexdigest()
        return selectors.run_cache_key(run=run, name=f"detail:{digest}")


@extend_schema_view(
    get=extend_schema(
        responses={200: MetricSeriesOutputSerializer, **error_responses(404)},
        operation_id="runs_metrics",
        description="Column-wise metric series: one array per metric, one value per stored step. A finished, "
        "failed or cancelled run's answer is cached until the run changes.",
    )
)
class RunMetricsApi(RunReadApi):
    output = MetricSeriesOutputSerializer
    cache_name = "metrics"
    columns = True
    related = False

    def read(self, run: Run, **query: Any) -> Any:
        return selectors.run_metric_series(run=run)


@extend_schema_view(
    get=extend_schema(
        responses={200: LineageOutputSerializer, **error_responses(404)},
        operation_id="runs_lineage",
        description="Instructions as nodes, parent → child edges, and every optimizer round with its critique, the "
        "failures it was shown and each candidate's verdict. A finished, failed or cancelled run's answer is cached "
        "until the run changes.",
    )
)
class RunLineageApi(RunReadApi):
    output = LineageOutputSerializer
    cache_name = "lineage"
    related = False

    def read(self, run: Run, **query: Any) -> Any:
        return selectors.run_lineage(run=run)


@extend_schema_view(
    get=extend_schema(
        responses={200: EvaluationsOutputSerializer, **error_responses(404)},
        operation_id="runs_evaluations",
        description="Every evaluation result, and the newest value per benchmark and metric.",
    )
)
class RunEvaluationsApi(RunReadApi):
    output = EvaluationsOutputSerializer

    def read(self, run: Run, **query: Any) -> Any:
        return selectors.run_evaluations(run=run)


class TableFilter(serializers.Serializer[Any]):
    step = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=10_000_000,
        help_text="A step with evaluations (see `steps`). Default: each benchmark's newest evaluation.",
    )
    exclude_overlap = serializers.BooleanField(
        required=False,
        default=False,
        help_text="true: each benchmark without its questions also in the run's training split (see "
        "`/runs/<id>/leakage/`); each cell's `excluded` says how many were left out.",
    )


@extend_schema_view(
    get=extend_schema(
        parameters=[TableFilter],
        responses={200: RunTableOutputSerializer, **error_responses(400, 404)},
        operation_id="runs_table",
        description="Table 1 of the run: per benchmark its EM and F1, computed from the per-question results when the "
        "evaluation kept them, and their unweighted average over the benchmarks (Avg.); from each benchmark's newest "
        "evaluation (the run's final one once it finished), or from those at `step`.",
    )
)
class RunTableApi(RunReadApi):
    output = RunTableOutputSerializer
    query = TableFilter

    def read(self, run: Run, **query: Any) -> Any:
        exclude = None
        if query.get("exclude_overlap"):
            names = selectors.run_benchmark_names(run=run)
            exclude = leakage.excluded_questions(leakage.config_leakage(run.config, team=run.team, benchmarks=names))
        return selectors.run_benchmark_table(run=run, step=query.get("step"), exclude=exclude)


class TrajectoryFilter(serializers.Serializer[Any]):
    step = serializers.IntegerField(
        required=False, min_value=0, max_value=10_000_000, help_text="Default: the newest step that has any."
    )


@extend_schema_view(
    get=extend_schema(
        parameters=[TrajectoryFilter],
        responses={200: TrajectoryPageOutputSerializer, **error_responses(400, 404)},
        operation_id="runs_trajectories",
        description="The trajectories sampled at one step.",
    )
)
class RunTrajectoriesApi(RunReadApi):
    output = TrajectoryPageOutputSerializer
    query = TrajectoryFilter

    def read(self, run: Run, **query: Any) -> Any:
        return selectors.run_trajectories(run=run, step=query.get("step"))


@extend_schema_view(
    get=extend_schema(
        responses={200: CheckpointOutputSerializer(many=True), **error_responses(404)},
        operation_id="runs_checkpoints",
        description="Every checkpoint the run saved: step, bytes, the archive's sha256, and whether its files remain.",
    )
)
class RunCheckpointsApi(RunReadApi):
    output = CheckpointOutputSerializer
    many = True

    def read(self, run: Run, **query: Any) -> Any:
        return selectors.checkpoint_list(run=run)


@extend_schema_view(
    get=extend_schema(
        responses={200: DiversityOutputSerializer, **error_responses(404)},
        operation_id="runs_diversity",
        description="How alike the living instructions were at every population record (pairwise embedding cosine, "
        "word-set overlap, distinct strategies, sampling entropy), column-wise; the run's thresholds; every "
        "collapse alarm, and the one active now (null when the population is not collapsed).",
    )
)
class RunDiversityApi(RunReadApi):
    output = DiversityOutputSerializer

    def read(self, run: Run, **query: Any) -> Any:
        return selectors.run_diversity(run=run)


class RunPopulationApi(APIView):
    @extend_schema(
        responses={200: PopulationOutputSerializer, **error_responses(404)},
        operation_id="runs_population",
        description="Every population snapshot, column-wise: one array per snapshot field and, per instruction, "
        "one array per statistic over the snapshots from its first membership to its last. A finished, failed or "
        "cancelled run's answer is cached until the run changes.",
    )
    def get(self, request: Request, run_id: str) -> HttpResponse:
        user = acting_user(request)
        run = selectors.run_get(user=user, run_id=run_id, related=False)
        return cached_json(
            request,
            selectors.run_cache_key(run=run, name="population"),
            lambda: selectors.run_population_columns(run=run),
        )
