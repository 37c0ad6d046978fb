"""REST API for runs under /api/v1/: each view validates with a serializer, calls one service or selector, and
serialises the result. Team scoping lives in `selectors.run_get` (404 for other teams) and roles in services."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.http import Http404, HttpResponse, HttpResponseBase, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.accounts.models import Team, User
from webapp.accounts.permissions import acting_user
from webapp.accounts.selectors import team_get, team_list
from webapp.core.errors import InvalidInput
from webapp.core.files import file_response
from webapp.core.responses import cached_json
from webapp.core.text import has_nul

from . import selectors, services
from .archives import checkpoint_archive
from .configs import PRESET_NAMES, config_compose
from .models import Checkpoint, EvaluationRequest, Run

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


TagsField = serializers.ListField(child=serializers.CharField(max_length=64), max_length=20, required=False)


class RunOutputSerializer(serializers.ModelSerializer[Run]):
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    creator: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(slug_field="username", read_only=True)
    tags = serializers.SerializerMethodField()
    progress = serializers.FloatField()
    queue = serializers.CharField()
    best_instruction_id = serializers.SerializerMethodField()
    cloned_from: serializers.PrimaryKeyRelatedField[Run] = serializers.PrimaryKeyRelatedField(read_only=True)

    class Meta:
        model = Run
        fields = (
            "id",
            "team",
            "creator",
            "name",
            "tags",
            "status",
            "backend",
            "queue",
            "preset",
            "seed",
            "config",
            "created_at",
            "started_at",
            "finished_at",
            "heartbeat_at",
            "step",
            "total_steps",
            "progress",
            "error",
            "attempts",
            "best_instruction_id",
            "cloned_from",
        )
        read_only_fields = fields

    def get_tags(self, run: Run) -> list[str]:
        return sorted(tag.name for tag in run.tags.all())

    def get_best_instruction_id(self, run: Run) -> str | None:
        return run.best_instruction.key if run.best_instruction else None


# -- runs: list, create, retrieve ---------------------------------------------------------------------------------


class RunPagination(PageNumberPagination):
    page_size = 20
    page_size_query_param = "page_size"
    max_page_size = 200


class RunListCreateApi(APIView):
    class RunListFilter(serializers.Serializer[Any]):
        status = serializers.ChoiceField(choices=Run.Status.choices, required=False)
        tag = serializers.CharField(max_length=64, required=False)
        creator = serializers.CharField(max_length=150, required=False)
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
        parameters=[RunListFilter],
        responses=RunOutputSerializer(many=True),
        operation_id="runs_list",
    )
    def get(self, request: Request) -> Response:
        user = acting_user(request)
        filters = self.RunListFilter(data=request.query_params)
        filters.is_valid(raise_exception=True)
        runs = selectors.run_list(user=user, **filters.validated_data)
        paginator = RunPagination()
        page = paginator.paginate_queryset(runs, request, view=self)
        return paginator.get_paginated_response(RunOutputSerializer(page, many=True).data)

    @extend_schema(request=RunCreateInput, responses={201: RunOutputSerializer}, operation_id="runs_create")
    def post(self, request: Request) -> Response:
        user = acting_user(request)
        data = self.RunCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        team = _submission_team(user, values.get("team"))
        config = config_compose(
            preset=values.get("preset"), base=values.get("config"), overrides=values.get("overrides")
        )
        run = services.run_submit(
            team=team,
            user=user,
            name=values["name"],
            config=config,
            tags=values.get("tags", []),
            preset=values.get("preset", ""),
        )
        return Response(RunOutputSerializer(run).data, status=201)


def _submission_team(user: User, slug: str | None) -> Team:
    """The named team among the user's, or their only team. Unknown and foreign slugs read the same."""
    if slug:
        try:
            return team_get(user=user, slug=slug)
        except Http404:
            raise InvalidInput({"team": ["no team with this slug among yours"]}) from None
    teams = list(team_list(user=user)[:2])
    if len(teams) != 1:
        raise InvalidInput({"team": ["you are in several teams (or none): name one"]})
    return teams[0]


class RunDetailApi(APIView):
    @extend_schema(responses=RunOutputSerializer, operation_id="runs_retrieve")
    def get(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        return Response(RunOutputSerializer(selectors.run_get(user=user, run_id=run_id)).data)


# -- actions -----------------------------------------------------------------------------------------------------


class RunCancelApi(APIView):
    @extend_schema(request=None, responses=RunOutputSerializer, operation_id="runs_cancel")
    def post(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        run = services.run_cancel(run=selectors.run_get(user=user, run_id=run_id), user=user)
        return Response(RunOutputSerializer(run).data)


class RunCloneApi(APIView):
    class RunCloneInput(serializers.Serializer[Any]):
        name = serializers.CharField(max_length=200, required=False)
        tags = TagsField
        overrides = ConfigField(required=False)

    @extend_schema(request=RunCloneInput, responses={201: RunOutputSerializer}, operation_id="runs_clone")
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


class RunResumeApi(APIView):
    @extend_schema(request=None, responses=RunOutputSerializer, operation_id="runs_resume")
    def post(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        run = services.run_resume(run=selectors.run_get(user=user, run_id=run_id), user=user)
        return Response(RunOutputSerializer(run).data)


class EvaluationRequestOutputSerializer(serializers.ModelSerializer[EvaluationRequest]):
    checkpoint_step = serializers.IntegerField(source="checkpoint.step")

    class Meta:
        model = EvaluationRequest
        fields = ("id", "checkpoint", "checkpoint_step", "benchmarks", "limit", "status", "error", "created_at")
        read_only_fields = fields


class RunEvaluateApi(APIView):
    class RunEvaluateInput(serializers.Serializer[Any]):
        benchmarks = serializers.ListField(child=serializers.CharField(max_length=200), min_length=1, max_length=20)
        checkpoint = serializers.IntegerField(required=False, min_value=1, help_text="Default: the newest.")
        limit = serializers.IntegerField(required=False, min_value=1, max_value=100_000)

    @extend_schema(
        request=RunEvaluateInput, responses={202: EvaluationRequestOutputSerializer}, operation_id="runs_evaluate"
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


# -- a run's data for charts --------------------------------------------------------------------------------------

_ANY_OBJECT = OpenApiTypes.OBJECT


class RunMetricsApi(APIView):
    @extend_schema(responses=_ANY_OBJECT, operation_id="runs_metrics", description="Column-wise metric series.")
    def get(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        run = selectors.run_get(user=user, run_id=run_id)
        return Response(selectors.run_metric_series(run=run))


def _column(child: serializers.Field[Any, Any, Any, Any], help_text: str) -> serializers.ListField:
    return serializers.ListField(child=child, help_text=help_text)


class PopulationOutputSerializer(serializers.Serializer[Any]):
    """The population history column-wise (`selectors.run_population_columns`): the snapshots' fields as arrays,
    and per instruction its statistics as arrays over the snapshots it spans. It documents the answer in the schema;
    the view sends the selector's columns as they are, because passing thousands of numbers through a field each
    costs more than reading them (tests check that this serializer reproduces them unchanged)."""

    class Snapshots(serializers.Serializer[Any]):
        step = _column(serializers.IntegerField(), "The step of each snapshot, ascending.")
        reason = _column(serializers.CharField(), "Why it was taken: initialised, step, pruned, evolved, …")
        best_id = _column(serializers.CharField(allow_null=True), "The best instruction at that snapshot.")
        time = _column(serializers.DateTimeField(), "When it was taken.")

    class InstructionColumns(serializers.Serializer[Any]):
        id = serializers.CharField()
        start = serializers.IntegerField(
            help_text="Index of the first snapshot it is a member of: element i of each array below belongs to "
            "snapshot start + i. The arrays end at its last membership."
        )
        weight = _column(serializers.FloatField(allow_null=True), "Its weight; null where it was not a member.")
        probability = _column(serializers.FloatField(allow_null=True), "Its sampling probability.")
        samples = _column(serializers.IntegerField(allow_null=True), "Rollouts that used it so far.")
        mean_reward = _column(serializers.FloatField(allow_null=True), "Their mean reward.")

    snapshots = Snapshots()
    instructions = InstructionColumns(many=True, help_text="In order of first membership.")


class RunPopulationApi(APIView):
    @extend_schema(
        responses=PopulationOutputSerializer,
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


class RunLineageApi(APIView):
    @extend_schema(responses=_ANY_OBJECT, operation_id="runs_lineage", description="Nodes, edges and rounds.")
    def get(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        run = selectors.run_get(user=user, run_id=run_id)
        return Response(selectors.run_lineage(run=run))


class RunEvaluationsApi(APIView):
    @extend_schema(responses=_ANY_OBJECT, operation_id="runs_evaluations", description="Results and a table.")
    def get(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        run = selectors.run_get(user=user, run_id=run_id)
        return Response(selectors.run_evaluations(run=run))


class RunTrajectoriesApi(APIView):
    class TrajectoryFilter(serializers.Serializer[Any]):
        step = serializers.IntegerField(required=False, min_value=0, max_value=10_000_000)

    @extend_schema(parameters=[TrajectoryFilter], responses=_ANY_OBJECT, operation_id="runs_trajectories")
    def get(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        filters = self.TrajectoryFilter(data=request.query_params)
        filters.is_valid(raise_exception=True)
        run = selectors.run_get(user=user, run_id=run_id)
        return Response(selectors.run_trajectories(run=run, step=filters.validated_data.get("step")))


class CheckpointOutputSerializer(serializers.ModelSerializer[Checkpoint]):
    class Meta:
        model = Checkpoint
        fields = ("id", "step", "bytes", "archive_bytes", "sha256", "files", "available", "created_at")
        read_only_fields = fields


class RunCheckpointsApi(APIView):
    @extend_schema(responses=CheckpointOutputSerializer(many=True), operation_id="runs_checkpoints")
    def get(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        run = selectors.run_get(user=user, run_id=run_id)
        return Response(CheckpointOutputSerializer(selectors.checkpoint_list(run=run), many=True).data)


# -- downloads ---------------------------------------------------------------------------------------------------


def _attachment(response: HttpResponse | StreamingHttpResponse, filename: str) -> None:
    response["Content-Disposition"] = f'attachment; filename="{filename}"'


class BestInstructionTextApi(APIView):
    @extend_schema(responses={(200, "text/plain"): OpenApiTypes.STR}, operation_id="runs_best_instruction_text")
    def get(self, request: Request, run_id: str) -> HttpResponse:
        user = acting_user(request)
        run = selectors.run_get(user=user, run_id=run_id)
        best = selectors.best_instruction(run=run)
        if best is None:
            return HttpResponse("the run has no instructions yet\n", status=404, content_type="text/plain")
        response = HttpResponse(best["text"] + "\n", content_type="text/plain; charset=utf-8")
        _attachment(response, f"best-instruction-{run.pk}.txt")
        return response


class BestInstructionApi(APIView):
    @extend_schema(
        responses=inline_serializer(
            "BestInstruction",
            {
                "run": serializers.DictField(),
                "instruction": serializers.DictField(),
                "config": serializers.DictField(),
            },
        ),
        operation_id="runs_best_instruction",
    )
    def get(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        run = selectors.run_get(user=user, run_id=run_id)
        best = selectors.best_instruction(run=run)
        if best is None:
            return Response({"detail": "the run has no instructions yet"}, status=404)
        body = {
            "run": {"id": str(run.pk), "name": run.name, "status": run.status, "step": run.step},
            "instruction": best,
            "config": run.config,
        }
        return Response(body)


class PopulationExportApi(APIView):
    @extend_schema(responses=_ANY_OBJECT, operation_id="runs_export")
    def get(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        run = selectors.run_get(user=user, run_id=run_id)
        response = Response(services.instruction_export(run=run, user=user))
        _attachment(response, f"population-{run.pk}.json")
        return response


class CheckpointArchiveApi(APIView):
    @extend_schema(
        responses={(200, "application/x-tar"): OpenApiTypes.BINARY, (206, "application/x-tar"): OpenApiTypes.BINARY},
        operation_id="runs_checkpoint_archive",
        description="The checkpoint's Hugging Face directory as an uncompressed tar; its sha256 is the "
        "checkpoint's `sha256`. Built once on the first download, then sent as a file: `Range` requests resume.",
    )
    def get(self, request: Request, run_id: str, checkpoint_id: int) -> HttpResponseBase:
        user = acting_user(request)
        run = selectors.run_get(user=user, run_id=run_id)
        checkpoint = selectors.checkpoint_get(run=run, checkpoint_id=checkpoint_id)
        built = checkpoint_archive(checkpoint=checkpoint, run_directory=selectors.run_directory(run_id=run.pk))
        return file_response(
            request,
            built.path,
            filename=f"{run.pk}-step-{checkpoint.step:06d}.tar",
            content_type="application/x-tar",
            etag=checkpoint.sha256,
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
        metric = serializers.CharField(max_length=32, default="em", help_text="The benchmark metric (em or f1).")

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            if "baseline" in attrs and attrs["baseline"] not in attrs["runs"]:
                raise serializers.ValidationError({"baseline": ["must be one of the compared runs"]})
            return attrs

    @extend_schema(
        parameters=[CompareInput],
        responses=_ANY_OBJECT,
        operation_id="runs_compare",
        description="Fig. 2 series, the benchmark table (best per column), the differing config fields and deltas "
        "against a baseline, for up to 12 runs.",
    )
    def get(self, request: Request) -> Response:
        user = acting_user(request)
        ids = [part for value in request.query_params.getlist("runs") for part in value.split(",") if part]
        data = self.CompareInput(data={**request.query_params.dict(), "runs": ids})
        data.is_valid(raise_exception=True)
        values = data.validated_data
        runs = selectors.runs_get(user=user, run_ids=values["runs"])
        baseline = next((run for run in runs if run.pk == values.get("baseline")), None)
        return Response(selectors.run_compare(runs=runs, metric=values["metric"], baseline=baseline))


class PingApi(APIView):
    """A trivial authenticated endpoint: health checks, and the baseline of bench/api.py."""

    @extend_schema(
        responses=inline_serializer("Ping", {"ok": serializers.BooleanField()}),
        operation_id="ping",
    )
    def get(self, request: Request) -> Response:
        acting_user(request)
        return Response({"ok": True})


# -- presets -----------------------------------------------------------------------------------------------------


class PresetListApi(APIView):
    @extend_schema(responses=_ANY_OBJECT, operation_id="presets_list")
    def get(self, request: Request) -> Response:
        return Response({name: config_compose(preset=name).to_dict() for name in PRESET_NAMES})
