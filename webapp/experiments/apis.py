"""REST API for experiments under /api/v1/experiments/: list, create (arms × seeds as ordinary runs), the cost estimate
of one not yet started, one experiment with its table and verdicts, and cancel. Team scoping lives in
`selectors.experiment_get` (404 for other teams) and roles in services, as for runs."""

from __future__ import annotations

import json
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from inspo_engine.experiments import MAX_ARMS, MAX_SEEDS
from webapp.accounts.permissions import acting_user
from webapp.accounts.selectors import team_for_submission
from webapp.core.api import ConfigField, JsonValueField, PagePagination, error_responses, query_once
from webapp.core.errors import InvalidInput
from webapp.runs.configs import PRESET_NAMES

from . import selectors, services
from .models import MAX_EXPERIMENT_RUNS
from .outputs import ExperimentDetailOutputSerializer, ExperimentEstimateOutputSerializer, ExperimentOutputSerializer


class ExperimentListCreateApi(APIView):
    pagination_class = PagePagination

    class ExperimentCreateInput(serializers.Serializer[Any]):
        team = serializers.SlugField(required=False, help_text="Team slug; optional when you are in one team.")
        name = serializers.CharField(max_length=200)
        preset = serializers.ChoiceField(choices=PRESET_NAMES, help_text="The base preset of every arm.")
        overrides = ConfigField(required=False, help_text='Overrides every arm shares: {"grpo.lr": 1e-6}.')
        arms = JsonValueField(
            help_text='Built-in arm names (["static", "inspo", "no-verify", "random-pool"]) or an object of name → '
            'overrides ({"static": null, "low-lr": {"grpo.lr": 1e-7}}).'
        )
        seeds = JsonValueField(
            help_text=f"A count (seeds 0 … n−1) or a list of distinct seeds: at most {MAX_SEEDS}, and at most "
            f"{MAX_EXPERIMENT_RUNS} runs (arms × seeds) in all."
        )
        evaluation = ConfigField(
            required=False,
            help_text='The held-out evaluation: {"benchmarks": ["builtin"], "split": "test", "size": 0, '
            '"sample_seed": 0}. Several benchmarks give a verdict each and one over their unweighted average; '
            '{"benchmark": "builtin"} names one, as before.',
        )
        baseline = serializers.CharField(max_length=64, required=False, help_text="The arm compared with (static).")

    @extend_schema(
        parameters=[PagePagination.Input],
        responses={200: ExperimentOutputSerializer(many=True), **error_responses(400, 404)},
        operation_id="experiments_list",
        description="The experiments of your teams, newest first, a page at a time.",
    )
    def get(self, request: Request) -> Response:
        user = acting_user(request)
        self.pagination_class.Input(data=query_once(request.query_params)).is_valid(raise_exception=True)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(selectors.experiment_list(user=user), request, view=self)
        return paginator.get_paginated_response(ExperimentOutputSerializer(page, many=True).data)

    @extend_schema(
        request=ExperimentCreateInput,
        responses={201: ExperimentOutputSerializer, **error_responses(400, 403, 413)},
        operation_id="experiments_create",
        description="Start an experiment: every arm × seed becomes an ordinary run. The engine validates the "
        "experiment and each arm's config, and each passes the checks of a run submission; a 400 names each bad "
        "field by its path (`seeds`, `overrides.grpo.lr`, `arms.<arm>.<field>`). Runs beyond the team's active-run "
        "quota wait as pending and start as slots free. 403 for a viewer.",
    )
    def post(self, request: Request) -> Response:
        user = acting_user(request)
        data = self.ExperimentCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        team = team_for_submission(user=user, slug=values.pop("team", None))
        name = values.pop("name")
        experiment = services.experiment_submit(team=team, user=user, name=name, spec=values)
        return Response(ExperimentOutputSerializer(experiment).data, status=201)


class ExperimentEstimateApi(APIView):
    class Input(serializers.Serializer[Any]):
        team = serializers.SlugField(required=False, help_text="Team slug; optional when you are in one team.")
        preset = serializers.ChoiceField(choices=PRESET_NAMES)
        arms = serializers.IntegerField(min_value=0, max_value=MAX_ARMS, help_text="How many arms.")
        seeds = serializers.IntegerField(
            min_value=0, max_value=10**9, help_text="Seeds per arm (past the limit, the text names the limit)."
        )
        benchmarks = serializers.CharField(
            required=False, max_length=4000, help_text="The benchmarks every run is evaluated on, separated by commas."
        )
        questions = serializers.IntegerField(
            required=False, min_value=0, help_text="Questions of each benchmark's test split (0: all of them)."
        )
        overrides = serializers.CharField(
            required=False, max_length=20000, help_text='The shared overrides as JSON: {"grpo.total_steps": 8}.'
        )
        dataset = serializers.CharField(required=False, max_length=300, help_text="The training questions.")

        def validate_overrides(self, value: str) -> dict[str, Any]:
            try:
                parsed = json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as error:
                raise serializers.ValidationError(f"not JSON: {error.msg}") from error
            if not isinstance(parsed, dict):
                raise serializers.ValidationError("give a JSON object of overrides")
            return parsed

    @extend_schema(
        parameters=[Input],
        responses={200: ExperimentEstimateOutputSerializer, **error_responses(400)},
        operation_id="experiments_estimate",
        description="What an experiment of `arms` × `seeds` runs of the preset would cost, as a range: worker time "
        "per run from the team's finished runs of the preset, each scaled to these runs' steps and evaluation "
        "questions (`overrides`, `benchmarks`, `questions`), else the preset's stated figure; the runs queued and "
        "running ahead of it on the same queue; and when its last run would end. Past "
        f"{MAX_SEEDS} seeds or {MAX_EXPERIMENT_RUNS} runs the text names the limit instead. Without `team`, a user "
        "of several teams gets the preset's figure.",
    )
    def get(self, request: Request) -> Response:
        user = acting_user(request)
        data = self.Input(data=query_once(request.query_params))
        data.is_valid(raise_exception=True)
        values = data.validated_data
        try:
            team = team_for_submission(user=user, slug=values.get("team"))
        except InvalidInput:
            if values.get("team"):
                raise
            team = None
        overrides = dict(values.get("overrides") or {})
        if values.get("dataset"):
            overrides["env.dataset"] = values["dataset"]
        evaluation = None
        if "benchmarks" in values or "questions" in values:
            names = [name.strip() for name in str(values.get("benchmarks") or "").split(",") if name.strip()]
            evaluation = {"benchmarks": names or ["builtin"], "split": "test", "size": values.get("questions") or 0}
        estimate = selectors.experiment_estimate(
            team=team,
            preset=values["preset"],
            arms=values["arms"],
            seeds=values["seeds"],
            overrides=overrides,
            evaluation=evaluation,
        )
        return Response(ExperimentEstimateOutputSerializer(estimate).data)


class ExperimentDetailApi(APIView):
    class DetailQuery(serializers.Serializer[Any]):
        exclude_overlap = serializers.BooleanField(
            required=False,
            default=False,
            help_text="true: the table and verdicts without each benchmark's questions also in a run's training "
            "split (`leakage` says how many were left out).",
        )

    @extend_schema(
        parameters=[DetailQuery],
        responses={200: ExperimentDetailOutputSerializer, **error_responses(400, 404)},
        operation_id="experiments_retrieve",
        description="The experiment, its runs, and the table and verdicts over the seeds that finished (`missing` "
        "lists the runs without results); `leakage`: per benchmark, its evaluated questions also in training.",
    )
    def get(self, request: Request, experiment_id: int) -> Response:
        query = self.DetailQuery(data=query_once(request.query_params))
        query.is_valid(raise_exception=True)
        experiment = selectors.experiment_get(user=acting_user(request), experiment_id=experiment_id)
        summary = selectors.experiment_summary(
            experiment=experiment, exclude_overlap=query.validated_data["exclude_overlap"]
        )
        return Response(ExperimentDetailOutputSerializer(summary).data)


class ExperimentCancelApi(APIView):
    @extend_schema(
        request=None,
        responses={200: ExperimentOutputSerializer, **error_responses(403, 404)},
        operation_id="experiments_cancel",
        description="Cancel every run of the experiment that has not ended: pending and queued ones at once, running "
        "ones after their current step.",
    )
    def post(self, request: Request, experiment_id: int) -> Response:
        user = acting_user(request)
        experiment = selectors.experiment_get(user=user, experiment_id=experiment_id)
        return Response(ExperimentOutputSerializer(services.experiment_cancel(experiment=experiment, user=user)).data)
