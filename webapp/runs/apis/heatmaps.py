"""Instruction × checkpoint heatmaps of a run: request one (or preview its cost), list them, read one and one
cell's answers."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.accounts.permissions import acting_user
from webapp.core.api import error_responses

from .. import heatmaps, selectors
from ..outputs import HeatmapCellDetailOutputSerializer, HeatmapOutputSerializer, HeatmapPreviewOutputSerializer

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
