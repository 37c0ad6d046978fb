"""A run's downloads: the best instruction (as text and with its lineage), the population export, and checkpoint
archives served as files with Range support."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.http import HttpResponse, HttpResponseBase, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.accounts.permissions import acting_user
from webapp.core.api import error_responses, query_once
from webapp.core.files import file_response

from .. import selectors, services
from ..archives import checkpoint_archive
from ..outputs import BestInstructionOutputSerializer, ExportOutputSerializer

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
        policy = serializers.ChoiceField(
            choices=("saved", "merged"),
            default="saved",
            help_text="saved: policy/ as the checkpoint holds it (a LoRA run's: its adapters, in peft's format); "
            "merged: a LoRA run's policy with its adapters merged, a plain Hugging Face directory that transformers "
            "loads without peft, as policy/ (the last checkpoint only; 410 otherwise).",
            error_messages={"invalid_choice": "unknown policy {input!r}; choose 'saved' or 'merged'"},
        )

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            if attrs["optimizer"] and attrs["policy"] == "merged":
                raise serializers.ValidationError(
                    {"policy": ["the merged policy comes without optimizer state: resuming needs the adapters"]}
                )
            return attrs

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
        "`archive_bytes` and `sha256` (with the optimizer state: `optimizer_archive_bytes`, `optimizer_sha256`; with "
        "`?policy=merged`: `merged_archive_bytes`, `merged_sha256`). Built once on the first download, then sent as "
        "a file: `Range` requests resume.",
    )
    def get(self, request: Request, run_id: str, checkpoint_id: int) -> HttpResponseBase:
        user = acting_user(request)
        query = self.ArchiveQuery(data=query_once(request.query_params))
        query.is_valid(raise_exception=True)
        optimizer = bool(query.validated_data["optimizer"])
        merged = query.validated_data["policy"] == "merged"
        run = selectors.run_get(user=user, run_id=run_id)
        checkpoint = selectors.checkpoint_get(run=run, checkpoint_id=checkpoint_id)
        built = checkpoint_archive(
            checkpoint=checkpoint,
            run_directory=selectors.run_directory(run_id=run.pk),
            optimizer=optimizer,
            merged=merged,
        )
        suffix = "-merged" if merged else "-with-optimizer" if optimizer else ""
        return file_response(
            request,
            built.path,
            filename=f"{run.pk}-step-{checkpoint.step:06d}{suffix}.tar",
            content_type="application/x-tar",
            etag=checkpoint.merged_sha256
            if merged
            else checkpoint.optimizer_sha256
            if optimizer
            else checkpoint.sha256,
            serve=settings.INSPO_ARCHIVE_SERVE,
            root=Path(settings.INSPO_ARCHIVE_DIR),
            accel_prefix=settings.INSPO_ARCHIVE_ACCEL_PREFIX,
        )
