"""REST API of reachability checks under /api/v1/reach-checks/: list (all the caller may see, or the one check of
a questions split × corpus × method × k, named by data references as a config names them), start, read, cancel.
A check is seen only by those who see both its datasets (404 otherwise); roles in the services."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.accounts.permissions import acting_user
from webapp.accounts.selectors import team_for_submission
from webapp.core.api import error_responses, query_once

from . import reach
from .indexing import METHODS
from .models import DatasetVersion, ReachCheck


def version_reference(version: DatasetVersion) -> str:
    """`data:<name>@<n>` of the version that added this file (the split's newest at that version)."""
    dataset = version.dataset
    return f"data:{'shared/' if dataset.shared else ''}{dataset.name}@{version.number}"


class ReachCheckOutputSerializer(serializers.ModelSerializer[ReachCheck]):
    questions = serializers.SerializerMethodField(help_text="The questions as data:<name>@<version>.")
    questions_dataset = serializers.IntegerField(source="questions.dataset_id", read_only=True)
    split = serializers.CharField(source="questions.split", read_only=True)
    corpus = serializers.SerializerMethodField(help_text="The corpus as data:<name>@<version>.")
    corpus_dataset = serializers.IntegerField(source="corpus.dataset_id", read_only=True)
    topk_share = serializers.FloatField(
        read_only=True, allow_null=True, help_text="Share of questions with a gold answer in the top k (done only)."
    )
    anywhere_share = serializers.FloatField(
        read_only=True, allow_null=True, help_text="Share of questions with a gold answer anywhere in the corpus."
    )
    low = serializers.SerializerMethodField(help_text="Whether the top-k share is below 30 %.")

    class Meta:
        model = ReachCheck
        fields = (
            "id", "questions", "questions_dataset", "split", "corpus", "corpus_dataset", "method", "k", "status",
            "stage", "done", "total", "question_count", "reachable_topk", "reachable_anywhere", "topk_share",
            "anywhere_share", "low", "examples", "error", "index_job", "created_at", "started_at", "finished_at",
        )  # fmt: skip

    def get_questions(self, check: ReachCheck) -> str:
        return version_reference(check.questions)

    def get_corpus(self, check: ReachCheck) -> str:
        return version_reference(check.corpus)

    def get_low(self, check: ReachCheck) -> bool | None:
        share = check.topk_share
        return None if share is None else share < reach.LOW_SHARE


class TargetInput(serializers.Serializer[Any]):
    questions = serializers.CharField(max_length=200, help_text="A questions dataset: data:<name>[@<version>].")
    split = serializers.RegexField(r"^[A-Za-z0-9_.-]{1,64}$", default="train", help_text="Its split (train).")
    corpus = serializers.CharField(max_length=200, help_text="A corpus: data:<name>[@<version>].")
    method = serializers.ChoiceField(choices=METHODS, default="bm25", help_text="The retriever (bm25).")
    k = serializers.IntegerField(min_value=1, max_value=reach.MAX_K, default=3, help_text="env.top_k (3).")
    team = serializers.SlugField(required=False, help_text="Team slug; optional when you are in one team.")


def _target(request: Request, fields: dict[str, Any]) -> reach.ReachTarget:
    team = team_for_submission(user=acting_user(request), slug=fields.get("team"))
    return reach.reach_target(
        team=team, questions=fields["questions"], split=fields["split"], corpus=fields["corpus"],
        method=fields["method"], k=fields["k"],
    )  # fmt: skip


class ReachCheckListApi(APIView):
    class ListInput(TargetInput):
        questions = serializers.CharField(max_length=200, required=False)
        corpus = serializers.CharField(max_length=200, required=False)

    @extend_schema(
        parameters=[ListInput],
        responses={200: ReachCheckOutputSerializer(many=True), **error_responses(400)},
        operation_id="reach_checks_list",
        description="The reachability checks you may see; with `questions` and `corpus` (and `split`, `method`, "
        "`k`, `team`), the one of that target if it was started (an empty list: not checked yet).",
    )
    def get(self, request: Request) -> Response:
        query = self.ListInput(data=query_once(request.query_params))
        query.is_valid(raise_exception=True)
        fields = query.validated_data
        if "questions" in fields or "corpus" in fields:
            missing = {name: ["give questions and corpus together"] for name in ("questions", "corpus")}
            if not {"questions", "corpus"} <= set(fields):
                raise serializers.ValidationError({k: v for k, v in missing.items() if k not in fields})
            found = reach.reach_check_find(_target(request, fields))
            checks: Any = [found] if found is not None else []
        else:
            checks = reach.reach_check_list(user=acting_user(request))[:200]
        return Response(ReachCheckOutputSerializer(checks, many=True).data)

    @extend_schema(
        request=TargetInput,
        responses={201: ReachCheckOutputSerializer, 200: ReachCheckOutputSerializer, **error_responses(400, 403)},
        operation_id="reach_checks_start",
        description="Check a questions split against a corpus, a retriever and k on a CPU worker (after the "
        "corpus's index job when its index is not built yet). The check already computed or under way answers 200.",
    )
    def post(self, request: Request) -> Response:
        data = TargetInput(data=request.data)
        data.is_valid(raise_exception=True)
        check, started = reach.reach_check_start(
            target=_target(request, data.validated_data), user=acting_user(request)
        )
        return Response(ReachCheckOutputSerializer(check).data, status=201 if started else 200)


class ReachCheckApi(APIView):
    @extend_schema(
        responses={200: ReachCheckOutputSerializer, **error_responses(404)},
        operation_id="reach_checks_read",
        description="One check: its progress (stage, done of total), then both shares and a few examples.",
    )
    def get(self, request: Request, check_id: int) -> Response:
        check = reach.reach_check_get(user=acting_user(request), check_id=check_id)
        return Response(ReachCheckOutputSerializer(check).data)


class ReachCheckCancelApi(APIView):
    @extend_schema(
        request=None,
        responses={200: ReachCheckOutputSerializer, **error_responses(403, 404, 409)},
        operation_id="reach_checks_cancel",
        description="Cancel a waiting, queued or running check (a running one stops at its next progress report).",
    )
    def post(self, request: Request, check_id: int) -> Response:
        user = acting_user(request)
        check = reach.reach_check_get(user=user, check_id=check_id)
        return Response(ReachCheckOutputSerializer(reach.reach_check_cancel(check=check, user=user)).data)
