"""Admin for experiments: read what a team started; changes go through the services (pages and the API)."""

from __future__ import annotations

from django.contrib import admin

from .models import Experiment


@admin.register(Experiment)
class ExperimentAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "team", "preset", "baseline", "status", "created_by", "created_at")
    list_filter = ("status", "preset", "team")
    search_fields = ("name",)
    readonly_fields = tuple(field.name for field in Experiment._meta.fields)
