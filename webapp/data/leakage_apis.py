"""REST API of leakage (`leakage`): what a questions dataset shares with the other question files its caller can
name (/api/v1/datasets/<id>/leakage/), and what each benchmark of a run shares with the run's training split
(/api/v1/runs/<id>/leakage/). Both scope by the caller's teams: another team's dataset or run is a 404."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.accounts.permissions import acting_user
from webapp.core.api import error_responses
from webapp.runs.selectors import run_benchmark_names, run_get

from . import selectors
from .leakage import config_leakage, dataset_leakage


class OverlapOutputSerializer(serializers.Serializer[Any]):
    evaluation_id = serializers.CharField(help_text="The evaluation question's id.")
    train_id = serializers.CharField(help_text="Its best match in the training split.")
    kind = serializers.ChoiceField(choices=("exact", "near"))
    similarity = serializers.FloatField(help_text="1 for exact; the idf-weighted Jaccard of the word bigrams.")


class ExampleOutputSerializer(OverlapOutputSerializer):
    evaluation_question = serializers.CharField()
    train_question = serializers.CharField()


class LeakageOutputSerializer(serializers.Serializer[Any]):
    """`leakage.Leakage.to_dict`."""

    train = serializers.CharField(help_text="The training split: data:<name> v<n> <split>, or builtin <split>.")
    evaluation = serializers.CharField(help_text="The evaluation split, named the same way.")
    status = serializers.ChoiceField(
        choices=("done", "checking", "failed"), help_text="checking: a worker is comparing a large pair."
    )
    questions = serializers.IntegerField(help_text="The evaluation split's questions.")
    train_questions = serializers.IntegerField()
    leaked = serializers.IntegerField(help_text="Evaluation questions also in training: exact + near.")
    exact = serializers.IntegerField()
    near = serializers.IntegerField()
    threshold = serializers.FloatField(help_text="The near-duplicate threshold on the similarity.")
    method = serializers.CharField()
    text = serializers.CharField(help_text="The finding in words, as the pages write it.")
    examples = ExampleOutputSerializer(many=True, help_text="At most 5: exact ones first, then near ones.")
    overlaps = OverlapOutputSerializer(many=True, help_text="Every evaluation question also in training.")
    error = serializers.CharField(allow_blank=True)


class BenchmarkLeakageOutputSerializer(LeakageOutputSerializer):
    """`leakage.BenchmarkLeakage.to_dict`: a benchmark of a run; only `benchmark` and `note` when it was not checked."""

    benchmark = serializers.CharField(help_text="As the run's config and evaluations name it.")
    note = serializers.CharField(allow_blank=True, help_text="Why it was not checked (a path, a split not held).")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, field in self.fields.items():
            if name != "benchmark":
                field.required = False


class DatasetLeakageApi(APIView):
    @extend_schema(
        responses={200: LeakageOutputSerializer(many=True), **error_responses(404)},
        operation_id="datasets_leakage",
        description="A questions dataset's overlaps, each split as of its newest version: its `train` split against "
        "each of its other splits, and against (or from) the other question datasets your teams can name, the shared "
        "ones included; at most 12 pairs. Exact: the same question after normalisation; near: idf-weighted Jaccard "
        "of the word bigrams ≥ 0.8. A large pair answers `checking` until a worker has compared it.",
    )
    def get(self, request: Request, dataset_id: int) -> Response:
        user = acting_user(request)
        dataset = selectors.dataset_get(user=user, dataset_id=dataset_id)
        others = selectors.dataset_list(user=user, kind="questions")
        reports = dataset_leakage(dataset=dataset, others=others)
        return Response(LeakageOutputSerializer([r.to_dict() for r in reports], many=True).data)


class RunLeakageApi(APIView):
    @extend_schema(
        responses={200: BenchmarkLeakageOutputSerializer(many=True), **error_responses(404)},
        operation_id="runs_leakage",
        description="Per benchmark of the run (its config's, then any other it was evaluated on): how many of its "
        "questions were also in the run's training split, exactly or nearly, with examples and every overlapping "
        "question's id. `GET /runs/<id>/table/?exclude_overlap=true` gives Table 1 without them.",
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = run_get(user=acting_user(request), run_id=run_id)
        rows = config_leakage(run.config, team=run.team, benchmarks=run_benchmark_names(run=run))
        return Response(BenchmarkLeakageOutputSerializer([r.to_dict() for r in rows], many=True).data)
