"""Django admin for runs and what they produce; the cancel action calls the same service as the API."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest

from webapp.core.errors import ServiceError

from . import services
from .models import Checkpoint, Evaluation, EvaluationRequest, EvolutionRound, Instruction, Run, StepMetric


class CheckpointInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Checkpoint
    extra = 0
    fields = ("step", "path", "bytes", "sha256", "available")
    readonly_fields = fields
    can_delete = False


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "team", "status", "backend", "step", "total_steps", "creator", "created_at")
    list_filter = ("status", "backend", "team")
    search_fields = ("name", "id")
    readonly_fields = tuple(f.name for f in Run._meta.concrete_fields)
    inlines = (CheckpointInline,)
    actions = ("cancel_runs",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # runs are submitted through the form or the API, where the engine validates the config

    @admin.action(description="Cancel the selected runs")
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        for run in queryset:
            try:
                services.run_cancel(run=run, user=request.user)  # type: ignore[arg-type]
            except (ServiceError, PermissionDenied) as error:
                self.message_user(request, f"{run.name}: {error}", messages.WARNING)


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Instruction)
class InstructionAdmin(ReadOnlyAdmin):
    list_display = ("key", "run", "origin", "birth_step", "retired_step", "verify_score")
    list_filter = ("origin",)
    search_fields = ("key", "text")


@admin.register(EvolutionRound)
class EvolutionRoundAdmin(ReadOnlyAdmin):
    list_display = ("key", "run", "step", "proposer", "optimizer_model", "input_tokens", "output_tokens", "cost_usd")


@admin.register(StepMetric)
class StepMetricAdmin(ReadOnlyAdmin):
    list_display = ("run", "step", "phase", "reward_mean", "kl", "entropy")


@admin.register(Evaluation)
class EvaluationAdmin(ReadOnlyAdmin):
    list_display = ("run", "step", "benchmark", "metric", "value", "n")
    list_filter = ("benchmark", "metric")


@admin.register(EvaluationRequest)
class EvaluationRequestAdmin(ReadOnlyAdmin):
    list_display = ("run", "checkpoint", "status", "created_at")
