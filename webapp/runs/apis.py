"""REST API for runs under /api/v1/: each view validates with a serializer, calls one service or selector, and
serialises the result with an output serializer of `outputs`. Team scoping lives in `selectors.run_get` (404 for
other teams) and roles in services. Every operation documents the errors it answers (`error_responses`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.http import HttpResponse, HttpResponseBase, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from inspo_engine.config import MAX_INSTRUCTION_CHARS
from webapp.accounts.models import Team, User
from webapp.accounts.permissions import acting_user
from webapp.accounts.selectors import team_for_submission, team_get
from webapp.core.api import error_responses, query_once
from webapp.core.files import file_response
from webapp.core.responses import cached_json
from webapp.core.text import has_nul

from . import heatmaps, selectors, services
from .archives import checkpoint_archive
from .configs import PRESET_NAMES, config_compose
from .models import ControlRequest, Run
from .outputs import (
    AlarmOutputSerializer,
    BestInstructionOutputSerializer,
    CheckpointOutputSerializer,
    ComparisonOutputSerializer,
    ControlRequestOutputSerializer,
    DiversityOutputSerializer,
    EvaluationRequestOutputSerializer,
    EvaluationsOutputSerializer,
    ExportOutputSerializer,
    HeatmapCellDetailOutputSerializer,
    HeatmapOutputSerializer,
    HeatmapPreviewOutputSerializer,
    LineageOutputSerializer,
    MetricSeriesOutputSerializer,
    PopulationOutputSerializer,
    PresetsOutputSerializer,
    RunDetailOutputSerializer,
    RunOutputSerializer,
    RunTableOutputSerializer,
    TeamTrackingOutputSerializer,
    TrackingSectionSerializer,
    TrajectoryPageOutputSerializer,
)

# -- shared fields -----------------------------------------------------------------------------------------------


class ConfigField(serializers.JSONField):
    """A JSON object (a partial engine config or overrides); the engine checks what is inside."""

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if not isinstance(value, dict):
            raise serializers.ValidationError("must be a JSON object")
        if has_nul(value):
            raise serializers.ValidationError("NUL characters are not allowed")
        return value


@extend_schema_field(TrackingSectionSerializer)
class TrackingSectionField(ConfigField):
    """A run config's tracking section as a JSON object, or null; the engine checks what is inside."""

    def to_internal_value(self, data: Any) -> Any:
        return None if data is None else super().to_internal_value(data)


INSTRUCTION_ID = r"^ins-[0-9]{4,9}$"
"""An engine instruction id."""

TagsField = serializers.ListField(child=serializers.CharField(max_length=64), max_length=20, required=False)


# -- runs: list, create, retrieve ---------------------------------------------------------------------------------


class RunPagination(PageNumberPagination):
    page_size = 20
    page_size_query_param = "page_size"
    max_page_size = 200

    class Input(serializers.Serializer[Any]):
        """The paginator's own parameters, checked first: it would read a bad value as the default."""

        page = serializers.IntegerField(required=False, min_value=1, help_text="Default 1; past the last: 404.")
        page_size = serializers.IntegerField(required=False, min_value=1, max_value=200, help_text="Default 20.")

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        """DRF's envelope, each of its four fields always sent (`next` and `previous` null at either end)."""
        envelope = super().get_paginated_response_schema(schema)
        return {**envelope, "required": ["count", "next", "previous", "results"]}


class RunListCreateApi(APIView):
    pagination_class = RunPagination

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
        parameters=[RunListFilter, RunPagination.Input],
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
    when it takes any) and documents them with `extend_schema`."""

    output: type[serializers.Serializer[Any]]
    many = False
    query: type[serializers.Serializer[Any]] | None = None
    cache_name: str | None = None
    """Set where what `read` makes of a run changes only while the run is active: a settled run's answer is then
    rendered once and served from the cache (`selectors.run_cache_key`). Only for views without query parameters."""

    def read(self, run: Run, **query: Any) -> Any:
        raise NotImplementedError

    def get(self, request: Request, run_id: str) -> Response | HttpResponse:
        user = acting_user(request)
        params: dict[str, Any] = {}
        if self.query is not None:
            filters = self.query(data=query_once(request.query_params))
            filters.is_valid(raise_exception=True)
            params = dict(filters.validated_data)
        run = selectors.run_get(user=user, run_id=run_id)
        if self.cache_name is not None:
            return cached_json(
                selectors.run_cache_key(run=run, name=self.cache_name),
                lambda: self.output(self.read(run), many=self.many).data,
            )
        return Response(self.output(self.read(run, **params), many=self.many).data)


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


@extend_schema_view(
    get=extend_schema(
        responses={200: MetricSeriesOutputSerializer, **error_responses(404)},
        operation_id="runs_metrics",
        description="Column-wise metric series: one array per metric, one value per stored step.",
    )
)
class RunMetricsApi(RunReadApi):
    output = MetricSeriesOutputSerializer

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
        return selectors.run_benchmark_table(run=run, step=query.get("step"))


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


class AlarmAcknowledgeApi(APIView):
    @extend_schema(
        request=None,
        responses={200: AlarmOutputSerializer, **error_responses(403, 404)},
        operation_id="runs_alarm_acknowledge",
        description="Mark a collapse alarm as seen: the run page no longer shows its banner. 403 for a viewer; "
        "acknowledging again keeps the first acknowledgement.",
    )
    def post(self, request: Request, run_id: str, alarm_id: int) -> Response:
        user = acting_user(request)
        run = selectors.run_get(user=user, run_id=run_id)
        alarm = services.alarm_acknowledge(run=run, user=user, alarm=selectors.alarm_get(run=run, alarm_id=alarm_id))
        return Response(AlarmOutputSerializer(selectors.alarm_row(alarm)).data)


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
        run = selectors.run_get(user=user, run_id=run_id)
        return cached_json(
            selectors.run_cache_key(run=run, name="population"),
            lambda: selectors.run_population_columns(run=run),
        )


# -- actions -----------------------------------------------------------------------------------------------------


class RunActionApi(APIView):
    """POST an action on a run of the caller's teams (404 for another team's): `act` calls its service, which
    checks the caller's role (403 for a viewer) and the run's state (409), and the run is sent back as it is now."""

    def act(self, run: Run, user: User) -> Run:
        raise NotImplementedError

    def post(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        run = self.act(selectors.run_get(user=user, run_id=run_id), user)
        return Response(RunOutputSerializer(run).data)


@extend_schema_view(
    post=extend_schema(
        request=None,
        responses={200: RunOutputSerializer, **error_responses(403, 404, 409)},
        operation_id="runs_cancel",
        description="A queued run is cancelled at once; a running one becomes cancelling and stops after its step.",
    )
)
class RunCancelApi(RunActionApi):
    def act(self, run: Run, user: User) -> Run:
        return services.run_cancel(run=run, user=user)


@extend_schema_view(
    post=extend_schema(
        request=None,
        responses={200: RunOutputSerializer, **error_responses(403, 404, 409)},
        operation_id="runs_resume",
        description="A failed or cancelled run is queued again and continues from its newest checkpoint; 429 when its "
        "team is at its active-run quota.",
    )
)
class RunResumeApi(RunActionApi):
    def act(self, run: Run, user: User) -> Run:
        return services.run_resume(run=run, user=user)


class RunCloneApi(APIView):
    class RunCloneInput(serializers.Serializer[Any]):
        name = serializers.CharField(max_length=200, required=False)
        tags = TagsField
        overrides = ConfigField(required=False)

    @extend_schema(
        request=RunCloneInput,
        responses={201: RunOutputSerializer, **error_responses(400, 403, 404, 413)},
        operation_id="runs_clone",
    )
    def post(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        data = self.RunCloneInput(data=request.data)
        data.is_valid(raise_exception=True)
        run = services.run_clone(
            run=selectors.run_get(user=user, run_id=run_id),
            user=user,
            **data.validated_data,
        )
        return Response(RunOutputSerializer(run).data, status=201)


class RunEvaluateApi(APIView):
    class RunEvaluateInput(serializers.Serializer[Any]):
        benchmarks = serializers.ListField(child=serializers.CharField(max_length=200), min_length=1, max_length=20)
        checkpoint = serializers.IntegerField(required=False, min_value=1, help_text="Default: the newest.")
        limit = serializers.IntegerField(required=False, min_value=1, max_value=100_000)

    @extend_schema(
        request=RunEvaluateInput,
        responses={202: EvaluationRequestOutputSerializer, **error_responses(400, 403, 404, 409, 410, 413)},
        operation_id="runs_evaluate",
    )
    def post(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        data = self.RunEvaluateInput(data=request.data)
        data.is_valid(raise_exception=True)
        run = selectors.run_get(user=user, run_id=run_id)
        values = data.validated_data
        checkpoint = None
        if "checkpoint" in values:
            checkpoint = selectors.checkpoint_get(run=run, checkpoint_id=values["checkpoint"])
        evaluation = services.run_evaluate(
            run=run,
            user=user,
            benchmarks=values["benchmarks"],
            checkpoint=checkpoint,
            limit=values.get("limit"),
        )
        return Response(EvaluationRequestOutputSerializer(evaluation).data, status=202)


# -- instruction × checkpoint heatmaps ------------------------------------------------------------------------------


class HeatmapInput(serializers.Serializer[Any]):
    """What a heatmap evaluates: each instruction (a row) with each checkpoint's policy (a column) on the same
    questions, drawn from the benchmark's test split by `sample_seed`."""

    instructions = serializers.ListField(
        child=serializers.CharField(max_length=32),
        min_length=1,
        max_length=heatmaps.MAX_INSTRUCTIONS,
        required=False,
        help_text="Instruction ids (ins-0003), living or pruned, as rows in this order; default: the `top_k` with "
        "the highest weights.",
    )
    top_k = serializers.IntegerField(
        min_value=1,
        max_value=heatmaps.MAX_INSTRUCTIONS,
        required=False,
        help_text=f"Rows when `instructions` is not given (default {heatmaps.DEFAULT_TOP_K}).",
    )
    steps = serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=10_000_000),
        min_length=1,
        max_length=heatmaps.MAX_CHECKPOINTS,
        required=False,
        help_text="Checkpoint steps still on disk; default: all of them (at most "
        f"{heatmaps.MAX_CHECKPOINTS}, spread over training).",
    )
    benchmark = serializers.CharField(
        max_length=1000, default="builtin", help_text="'builtin' or a FlashRAG JSONL in your team's data."
    )
    sample_size = serializers.IntegerField(
        min_value=1,
        max_value=heatmaps.MAX_SAMPLE_SIZE,
        default=heatmaps.DEFAULT_SAMPLE_SIZE,
        help_text="Questions every cell answers.",
    )
    sample_seed = serializers.IntegerField(
        min_value=0, max_value=2**31 - 1, default=0, help_text="Same seed and size: the same questions."
    )
    dry_run = serializers.BooleanField(
        default=False, help_text="true: only say what it would evaluate and cost (cells × questions); queue nothing."
    )


class RunHeatmapsApi(APIView):
    @extend_schema(
        responses={200: HeatmapOutputSerializer(many=True), **error_responses(404)},
        operation_id="runs_heatmaps_list",
        description="The run's instruction × checkpoint heatmaps, newest first, each with its cells (EM, F1; null "
        "until scored).",
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = selectors.run_get(user=acting_user(request), run_id=run_id)
        return Response(HeatmapOutputSerializer(heatmaps.heatmap_list(run=run), many=True).data)

    @extend_schema(
        request=HeatmapInput,
        responses={
            202: HeatmapOutputSerializer,
            200: HeatmapPreviewOutputSerializer,
            **error_responses(400, 403, 404, 409, 413),
        },
        operation_id="runs_heatmaps_create",
        description="Queue a heatmap (202), or with `dry_run` only say what it would cost (200). 400 names each bad "
        "field and the bounds (instructions × checkpoints × questions ≤ INSPO_HEATMAP_MAX_ANSWERS); 403 for a "
        "viewer; 409 when the run has no checkpoint or no instruction yet, or a heatmap queued or running.",
    )
    def post(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        data = HeatmapInput(data=request.data)
        data.is_valid(raise_exception=True)
        choices = dict(data.validated_data)
        dry_run = choices.pop("dry_run")
        run = selectors.run_get(user=user, run_id=run_id)
        if dry_run:
            plan = heatmaps.heatmap_plan(run=run, user=user, **choices)
            preview = {
                "dry_run": True,
                "instructions": [instruction.key for instruction in plan.instructions],
                "steps": [checkpoint.step for checkpoint in plan.checkpoints],
                "benchmark": plan.benchmark,
                "sample_size": plan.sample_size,
                "cells": plan.cells,
                "questions": plan.sample_size,
                "answers": plan.answers,
                "max_answers": heatmaps.max_answers(),
            }
            return Response(HeatmapPreviewOutputSerializer(preview).data)
        heatmap = heatmaps.heatmap_request(run=run, user=user, **choices)
        grid = heatmaps.heatmap_grid(heatmap=heatmaps.heatmap_get(run=run, heatmap_id=heatmap.pk))
        return Response(HeatmapOutputSerializer(grid).data, status=202)


class RunHeatmapApi(APIView):
    @extend_schema(
        responses={200: HeatmapOutputSerializer, **error_responses(404)},
        operation_id="runs_heatmaps_retrieve",
        description="One heatmap: its progress, rows, columns, cells and the best instruction per checkpoint.",
    )
    def get(self, request: Request, run_id: str, heatmap_id: int) -> Response:
        run = selectors.run_get(user=acting_user(request), run_id=run_id)
        grid = heatmaps.heatmap_grid(heatmap=heatmaps.heatmap_get(run=run, heatmap_id=heatmap_id))
        return Response(HeatmapOutputSerializer(grid).data)


class RunHeatmapCellApi(APIView):
    @extend_schema(
        responses={200: HeatmapCellDetailOutputSerializer, **error_responses(404)},
        operation_id="runs_heatmaps_cell",
        description="One cell of a heatmap with every greedy answer it gave (empty until scored), each with its EM "
        "and F1.",
    )
    def get(self, request: Request, run_id: str, heatmap_id: int, cell_id: int) -> Response:
        run = selectors.run_get(user=acting_user(request), run_id=run_id)
        heatmap = heatmaps.heatmap_get(run=run, heatmap_id=heatmap_id)
        return Response(HeatmapCellDetailOutputSerializer(heatmaps.heatmap_cell(heatmap=heatmap, cell_id=cell_id)).data)


class RunControlApi(APIView):
    """A run's control requests: steer its population while it is queued or running."""

    class ControlInput(serializers.Serializer[Any]):
        kind = serializers.ChoiceField(
            choices=ControlRequest.Kind.choices,
            help_text="inject a hand-written instruction; pin one so pruning never drops it; unpin it; retire one now.",
        )
        text = serializers.CharField(
            required=False, max_length=MAX_INSTRUCTION_CHARS, help_text="inject only: the instruction."
        )
        verify = serializers.BooleanField(
            required=False,
            default=True,
            help_text="inject only: verify it like the optimizer's candidates, against I* (false: skip verification "
            "and join unscored).",
        )
        instruction_id = serializers.RegexField(
            INSTRUCTION_ID, required=False, max_length=32, help_text="pin, unpin, retire: the instruction (ins-0003)."
        )

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            inject = attrs["kind"] == ControlRequest.Kind.INJECT
            needed, unwanted = ("text", "instruction_id") if inject else ("instruction_id", "text")
            errors = {}
            if needed not in attrs:
                errors[needed] = [f"required for {attrs['kind']}"]
            if unwanted in attrs:
                errors[unwanted] = [f"not for {attrs['kind']}"]
            if errors:
                raise serializers.ValidationError(errors)
            return attrs

    @extend_schema(
        responses={200: ControlRequestOutputSerializer(many=True), **error_responses(404)},
        operation_id="runs_control_list",
        description="The run's control requests, newest first: pending, or applied or rejected by the engine before "
        "a step, with its outcome.",
    )
    def get(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        run = selectors.run_get(user=user, run_id=run_id)
        return Response(ControlRequestOutputSerializer(selectors.control_request_rows(run=run), many=True).data)

    @extend_schema(
        request=ControlInput,
        responses={201: ControlRequestOutputSerializer, **error_responses(400, 403, 404, 409, 413)},
        operation_id="runs_control_create",
        description="Ask the engine to inject an instruction, or to pin, unpin or retire one, at its next step "
        "boundary; the request is pending until then. 403 for a viewer; 409 unless the run is queued or running.",
    )
    def post(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        data = self.ControlInput(data=request.data)
        data.is_valid(raise_exception=True)
        run = selectors.run_get(user=user, run_id=run_id)
        created = services.control_request_create(run=run, user=user, **data.validated_data)
        return Response(ControlRequestOutputSerializer(selectors.control_request_row(created)).data, status=201)


# -- downloads ---------------------------------------------------------------------------------------------------


def _attachment(response: HttpResponse | StreamingHttpResponse, filename: str) -> None:
    response["Content-Disposition"] = f'attachment; filename="{filename}"'


NO_INSTRUCTIONS = "the run has no instructions yet"


class BestInstructionTextApi(APIView):
    @extend_schema(
        responses={
            (200, "text/plain"): OpenApiTypes.STR,
            (404, "text/plain"): OpenApiResponse(OpenApiTypes.STR, description=f"{NO_INSTRUCTIONS}."),
            **error_responses(404),
        },
        operation_id="runs_best_instruction_text",
        description="The best instruction's text, as a file.",
    )
    def get(self, request: Request, run_id: str) -> HttpResponse:
        user = acting_user(request)
        run = selectors.run_get(user=user, run_id=run_id)
        best = selectors.best_instruction(run=run)
        if best is None:
            return HttpResponse(f"{NO_INSTRUCTIONS}\n", status=404, content_type="text/plain")
        response = HttpResponse(best["text"] + "\n", content_type="text/plain; charset=utf-8")
        _attachment(response, f"best-instruction-{run.pk}.txt")
        return response


class BestInstructionApi(APIView):
    @extend_schema(
        responses={200: BestInstructionOutputSerializer, **error_responses(404)},
        operation_id="runs_best_instruction",
        description="The best instruction with its weight and lineage back to the seed, and the run's config; 404 "
        "also while the run has no instructions.",
    )
    def get(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        run = selectors.run_get(user=user, run_id=run_id)
        best = selectors.best_instruction(run=run)
        if best is None:
            return Response({"detail": NO_INSTRUCTIONS}, status=404)
        body = {
            "run": {"id": str(run.pk), "name": run.name, "status": run.status, "step": run.step},
            "instruction": best,
            "config": run.config,
        }
        return Response(BestInstructionOutputSerializer(body).data)


class PopulationExportApi(APIView):
    @extend_schema(
        responses={200: ExportOutputSerializer, **error_responses(404)},
        operation_id="runs_export",
        description="The whole population with lineage, critiques and weights, the row-wise population history and "
        "the config, as one JSON file.",
    )
    def get(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        run = selectors.run_get(user=user, run_id=run_id)
        response = Response(ExportOutputSerializer(services.instruction_export(run=run, user=user)).data)
        _attachment(response, f"population-{run.pk}.json")
        return response


class CheckpointArchiveApi(APIView):
    class ArchiveQuery(serializers.Serializer[Any]):
        optimizer = serializers.BooleanField(
            required=False,
            default=False,
            help_text="1: also the optimizer state (training/), which only resuming needs; only the newest "
            "checkpoint of a run that can still resume keeps one (410 otherwise).",
        )

    @extend_schema(
        parameters=[ArchiveQuery],
        responses={
            (200, "application/x-tar"): OpenApiTypes.BINARY,
            (206, "application/x-tar"): OpenApiTypes.BINARY,
            **error_responses(400, 404, 409, 410, 416),
        },
        operation_id="runs_checkpoint_archive",
        description="The checkpoint as an uncompressed tar, laid out as on disk: `step-NNNNNN/inspo_state.json` (the "
        "population with its lineage at that step, the replay buffer and the loop's progress) and `policy/` (the "
        "Hugging Face directory); with `?optimizer=1` also `training/`. Its size and sha256 are the checkpoint's "
        "`archive_bytes` and `sha256` (with the optimizer state: `optimizer_archive_bytes`, `optimizer_sha256`). "
        "Built once on the first download, then sent as a file: `Range` requests resume.",
    )
    def get(self, request: Request, run_id: str, checkpoint_id: int) -> HttpResponseBase:
        user = acting_user(request)
        query = self.ArchiveQuery(data=query_once(request.query_params))
        query.is_valid(raise_exception=True)
        optimizer = bool(query.validated_data["optimizer"])
        run = selectors.run_get(user=user, run_id=run_id)
        checkpoint = selectors.checkpoint_get(run=run, checkpoint_id=checkpoint_id)
        built = checkpoint_archive(
            checkpoint=checkpoint, run_directory=selectors.run_directory(run_id=run.pk), optimizer=optimizer
        )
        return file_response(
            request,
            built.path,
            filename=f"{run.pk}-step-{checkpoint.step:06d}{'-with-optimizer' if optimizer else ''}.tar",
            content_type="application/x-tar",
            etag=checkpoint.optimizer_sha256 if optimizer else checkpoint.sha256,
            serve=settings.INSPO_ARCHIVE_SERVE,
            root=Path(settings.INSPO_ARCHIVE_DIR),
            accel_prefix=settings.INSPO_ARCHIVE_ACCEL_PREFIX,
        )


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
        description="Fig. 2 series, the benchmark table (best per column), the differing config fields and deltas "
        "against a baseline, for up to 12 runs.",
    )
    def get(self, request: Request) -> Response:
        user = acting_user(request)
        query = query_once(request.query_params, many={"runs"})
        ids = [part for value in query.get("runs", []) for part in value.split(",") if part]
        data = self.CompareInput(data={**query, "runs": ids})
        data.is_valid(raise_exception=True)
        values = data.validated_data
        runs = selectors.runs_get(user=user, run_ids=values["runs"])
        baseline = next((run for run in runs if run.pk == values.get("baseline")), None)
        comparison = selectors.run_compare(runs=runs, metric=values["metric"], baseline=baseline)
        return Response(ComparisonOutputSerializer(comparison).data)


class PingApi(APIView):
    """A trivial authenticated endpoint: health checks, and the baseline of bench/api.py."""

    @extend_schema(
        responses={200: inline_serializer("Ping", {"ok": serializers.BooleanField()}), **error_responses()},
        operation_id="ping",
    )
    def get(self, request: Request) -> Response:
        acting_user(request)
        return Response({"ok": True})


# -- a team's default trackers ------------------------------------------------------------------------------------


class TeamTrackingApi(APIView):
    """The team's default trackers: the tracking section of its runs that name none (docs/tracking.md). Everyone in
    the team reads it; owners set it."""

    class TeamTrackingInput(serializers.Serializer[Any]):
        tracking = TrackingSectionField(
            allow_null=True,
            help_text="The whole section (fields left out take the engine's defaults); null or {} removes it.",
        )

    @extend_schema(
        responses={200: TeamTrackingOutputSerializer, **error_responses(404)},
        operation_id="team_tracking_get",
        description="The team's default trackers; `tracking` is null when it has none.",
    )
    def get(self, request: Request, slug: str) -> Response:
        team = team_get(user=acting_user(request), slug=slug)
        return Response(TeamTrackingOutputSerializer({"tracking": selectors.team_tracking(team=team)}).data)

    @extend_schema(
        request=TeamTrackingInput,
        responses={200: TeamTrackingOutputSerializer, **error_responses(400, 403, 404, 413)},
        operation_id="team_tracking_set",
        description="Replace the team's default trackers (owners only; 403 otherwise). It is checked as a run's "
        "tracking is at submission: 400 names each bad field (`tracking.mlflow_uri`, …). A run whose config and "
        "overrides name no tracking field gets it when submitted.",
    )
    def put(self, request: Request, slug: str) -> Response:
        user = acting_user(request)
        team = team_get(user=user, slug=slug)
        data = self.TeamTrackingInput(data=request.data)
        data.is_valid(raise_exception=True)
        services.team_tracking_set(team=team, user=user, tracking=data.validated_data["tracking"])
        return Response(TeamTrackingOutputSerializer({"tracking": selectors.team_tracking(team=team)}).data)


# -- presets -----------------------------------------------------------------------------------------------------


class PresetListApi(APIView):
    @extend_schema(
        responses={200: PresetsOutputSerializer, **error_responses()},
        operation_id="presets_list",
        description="Every preset's whole config, by name.",
    )
    def get(self, request: Request) -> Response:
        presets = {name: config_compose(preset=name).to_dict() for name in PRESET_NAMES}
        return Response(PresetsOutputSerializer(presets).data)
