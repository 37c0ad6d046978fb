"""REST API for data under /api/v1/datasets/: list (the caller's teams' and the shared), upload (multipart), one
dataset with its splits, preview, length histogram, versions and the runs that used it, delete, and index jobs
(start, read, cancel). Team scoping lives in `selectors` (404 for other teams), roles in services."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.accounts.permissions import acting_user
from webapp.accounts.selectors import team_for_submission
from webapp.core.api import error_responses, query_once
from webapp.core.errors import InvalidInput

from . import indexing, selectors, services
from .models import Dataset, DatasetVersion, IndexJob
from .reach import reach_checks_of
from .reach_apis import ReachCheckOutputSerializer as ReachOutput
from .retrieval import retrieval_status
from .shapes import FieldMap
from .uploads import upload_too_large


class VersionOutputSerializer(serializers.ModelSerializer[DatasetVersion]):
    class Meta:
        model = DatasetVersion
        fields = (
            "number", "split", "sha256", "size_bytes", "records", "source_name", "source_format", "lengths",
            "created_at",
        )  # fmt: skip


class DatasetOutputSerializer(serializers.ModelSerializer[Dataset]):
    reference = serializers.SerializerMethodField(help_text="What a config names: data:<name> (data:shared/<name>).")
    team: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, allow_null=True
    )
    shared = serializers.BooleanField(read_only=True)
    splits = serializers.SerializerMethodField()
    version = serializers.SerializerMethodField(help_text="The newest version's number.")
    size_bytes = serializers.SerializerMethodField(help_text="The newest version's files, every split.")

    class Meta:
        model = Dataset
        fields = ("id", "name", "kind", "team", "shared", "reference", "version", "splits", "size_bytes", "created_at")

    def get_reference(self, dataset: Dataset) -> str:
        return f"data:{'shared/' if dataset.shared else ''}{dataset.name}"

    def get_splits(self, dataset: Dataset) -> dict[str, int]:
        return {s.split: s.records for s in selectors.dataset_splits(dataset=dataset)}

    def get_version(self, dataset: Dataset) -> int:
        return max((v.number for v in dataset.versions.all()), default=0)

    def get_size_bytes(self, dataset: Dataset) -> int:
        return sum(s.size_bytes for s in selectors.dataset_splits(dataset=dataset))


class IndexJobOutputSerializer(serializers.ModelSerializer[IndexJob]):
    version = serializers.IntegerField(source="version.number", read_only=True)
    eta_s = serializers.FloatField(read_only=True, allow_null=True, help_text="Seconds left at the rate so far.")
    estimate_s = serializers.SerializerMethodField(
        help_text="A dense job on the cpu queue, before it has a rate: seconds its encoding will take."
    )
    queue = serializers.SerializerMethodField(
        help_text="The worker queue that builds it (dense: gpu where there is one)."
    )

    class Meta:
        model = IndexJob
        fields = (
            "id", "version", "method", "status", "passages_done", "passages_total", "rate", "eta_s", "estimate_s",
            "queue", "error", "created_at", "started_at", "finished_at",
        )  # fmt: skip

    def get_estimate_s(self, job: IndexJob) -> float | None:
        return indexing.index_job_estimate_s(job)

    def get_queue(self, job: IndexJob) -> str:
        return indexing.index_queue(job.method)


class DatasetListCreateApi(APIView):
    parser_classes = (MultiPartParser,)

    class ListInput(serializers.Serializer[Any]):
        team = serializers.SlugField(required=False)
        kind = serializers.ChoiceField(choices=Dataset.Kind.choices, required=False)

    class UploadInput(serializers.Serializer[Any]):
        file = serializers.FileField(help_text="FlashRAG JSONL, Search-R1 parquet, or either gzipped (.gz).")
        name = serializers.CharField(
            max_length=64, trim_whitespace=False, help_text="The dataset's name: configs say data:<name>."
        )  # checked as sent: "nl\n" is no name
        kind = serializers.ChoiceField(choices=Dataset.Kind.choices)
        split = serializers.CharField(max_length=64, required=False, allow_blank=True, help_text="train (default)")
        team = serializers.SlugField(required=False, help_text="Team slug; optional when you are in one team.")
        question_field = serializers.CharField(
            max_length=200, required=False, allow_blank=True, help_text="A dotted path, such as extra_info.question."
        )
        answers_field = serializers.CharField(
            max_length=200, required=False, allow_blank=True, help_text="A dotted path, such as extra_info.answer."
        )
        id_field = serializers.CharField(
            max_length=200, required=False, allow_blank=True, help_text="A dotted path; none: the line number."
        )

    @extend_schema(
        parameters=[ListInput],
        responses={200: DatasetOutputSerializer(many=True), **error_responses(400)},
        operation_id="datasets_list",
        description="Your teams' datasets and the operator's shared ones.",
    )
    def get(self, request: Request) -> Response:
        query = self.ListInput(data=query_once(request.query_params))
        query.is_valid(raise_exception=True)
        datasets = selectors.dataset_list(user=acting_user(request), **query.validated_data)
        return Response(DatasetOutputSerializer(datasets, many=True).data)

    @extend_schema(
        request={"multipart/form-data": UploadInput},
        responses={201: VersionOutputSerializer, 200: VersionOutputSerializer, **error_responses(400, 403, 413)},
        operation_id="datasets_upload",
        description="Upload a file as the next version of your team's dataset `name` (created when new), checked "
        "while it streams: the first bad record is a 400 naming the file, the line or row, and the field, and "
        "nothing is kept. The same content again answers 200 with the version it already is. 413 past the upload "
        "limit; 400 past the team's total. 403 for a viewer.",
    )
    def post(self, request: Request) -> Response:
        upload = read_upload(request)
        if upload is None:
            return Response({"detail": services.too_large_message()}, status=413)
        uploaded = services.dataset_upload(**upload)
        body = VersionOutputSerializer(uploaded.version).data | {
            "dataset": DatasetOutputSerializer(uploaded.version.dataset).data,
            "created": uploaded.created,
            "detected_shape": uploaded.shape,
            "ids_from": uploaded.ids,
        }
        return Response(body, status=201 if uploaded.created else 200)


def read_upload(request: Request) -> dict[str, Any] | None:
    """An upload request's body, checked (a 400 for a bad field), as the keyword arguments of
    `services.dataset_upload` and `staging.upload_stage`: the acting user, the team it is for, the file and its
    fields; None when the body was past the upload limit (the caller answers 413)."""
    user = acting_user(request)
    data = DatasetListCreateApi.UploadInput(data=request.data)  # reading the body runs the upload handler
    if upload_too_large(request._request):
        return None
    data.is_valid(raise_exception=True)
    fields = data.validated_data
    mapping = FieldMap(fields.get("question_field", ""), fields.get("answers_field", ""), fields.get("id_field", ""))
    return {
        "team": team_for_submission(user=user, slug=fields.get("team")),
        "user": user,
        "name": fields["name"],
        "kind": fields["kind"],
        "split": fields.get("split", ""),
        "upload": fields["file"],
        "filename": fields["file"].name,
        "mapping": mapping,
    }


class DatasetDetailApi(APIView):
    class DetailInput(serializers.Serializer[Any]):
        split = serializers.CharField(max_length=64, required=False, help_text="The preview's split.")

    @extend_schema(
        parameters=[DetailInput],
        responses={200: DatasetOutputSerializer, **error_responses(400, 404)},
        operation_id="datasets_read",
        description="One dataset: its splits, versions, a preview of 20 rows, the answer (or passage) length "
        "histogram, the runs of your teams that used it, its index jobs, and `files_missing`: the versions whose file "
        "the data storage no longer holds (uploading the same file again restores it).",
    )
    def get(self, request: Request, dataset_id: int) -> Response:
        user = acting_user(request)
        query = self.DetailInput(data=query_once(request.query_params))
        query.is_valid(raise_exception=True)
        dataset = selectors.dataset_get(user=user, dataset_id=dataset_id)
        uses = selectors.dataset_runs(dataset=dataset, user=user)
        body = DatasetOutputSerializer(dataset).data | {
            "versions": VersionOutputSerializer(dataset.versions.order_by("number"), many=True).data,
            "preview": selectors.dataset_preview(dataset=dataset, split=query.validated_data.get("split")),
            "files_missing": [v.number for v in selectors.dataset_files_missing(dataset=dataset)],
            "lengths": {s.split: s.lengths for s in selectors.dataset_splits(dataset=dataset)},
            "runs": [
                {"id": str(u.run_id), "name": u.run.name, "status": u.run.status, "version": u.version.number}
                for u in uses[:100]
            ],
            "index_jobs": IndexJobOutputSerializer(selectors.index_job_list(dataset=dataset), many=True).data,
            "reach_checks": ReachOutput(reach_checks_of(user=user, dataset_id=dataset.pk), many=True).data,
        }
        return Response(body)

    @extend_schema(
        request=None,
        responses={204: None, **error_responses(400, 403, 404, 409)},
        operation_id="datasets_delete",
        description="Delete your team's dataset and its files; 409 while a run uses it (naming the runs).",
    )
    def delete(self, request: Request, dataset_id: int) -> Response:
        user = acting_user(request)
        services.dataset_delete(dataset=selectors.dataset_get(user=user, dataset_id=dataset_id), user=user)
        return Response(status=204)


class DatasetIndexApi(APIView):
    class IndexInput(serializers.Serializer[Any]):
        method = serializers.ChoiceField(choices=indexing.METHODS, default="bm25")

    @extend_schema(
        request=IndexInput,
        responses={201: IndexJobOutputSerializer, 200: IndexJobOutputSerializer, **error_responses(400, 403, 404)},
        operation_id="datasets_index",
        description="Build the corpus's retrieval index (bm25 or dense) on a CPU worker; the job that already "
        "exists (or the index already built) answers 200.",
    )
    def post(self, request: Request, dataset_id: int) -> Response:
        user = acting_user(request)
        dataset = selectors.dataset_get(user=user, dataset_id=dataset_id)
        data = self.IndexInput(data=request.data)
        data.is_valid(raise_exception=True)
        job, created = indexing.index_job_start(dataset=dataset, user=user, method=data.validated_data["method"])
        return Response(IndexJobOutputSerializer(job).data, status=201 if created else 200)


class IndexJobApi(APIView):
    @extend_schema(
        responses={200: IndexJobOutputSerializer, **error_responses(400, 404)},
        operation_id="index_jobs_read",
        description="An index job's progress: passages done of all, the rate, the time left.",
        parameters=[OpenApiParameter("job_id", int, OpenApiParameter.PATH)],
    )
    def get(self, request: Request, job_id: int) -> Response:
        return Response(
            IndexJobOutputSerializer(selectors.index_job_get(user=acting_user(request), job_id=job_id)).data
        )


class IndexJobCancelApi(APIView):
    @extend_schema(
        request=None,
        responses={200: IndexJobOutputSerializer, **error_responses(400, 403, 404, 409)},
        operation_id="index_jobs_cancel",
        description="Cancel a queued or running index job (a running one stops at its next progress report).",
    )
    def post(self, request: Request, job_id: int) -> Response:
        user = acting_user(request)
        job = selectors.index_job_get(user=user, job_id=job_id)
        if job.version.dataset.team is None and not user.is_staff:
            raise InvalidInput({"job": ["shared data's index jobs are the operator's"]})
        return Response(IndexJobOutputSerializer(indexing.index_job_cancel(job=job, user=user)).data)


class RetrievalStatusApi(APIView):
    @extend_schema(
        summary="The retrieval service: its memory, and the size and query latency of each index your teams can see",
        responses={200: dict[str, Any], **error_responses(503)},
    )
    def get(self, request: Request) -> Response:
        return Response(retrieval_status(user=acting_user(request)))
