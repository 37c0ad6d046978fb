"""REST API for uploads seen before they are kept (`staging`): `POST /api/v1/datasets/preview/` checks and stages a
file and answers its first rows as they will be read; `GET`/`DELETE /api/v1/datasets/staged/<id>/` read or discard
it; `POST /api/v1/datasets/staged/<id>/confirm/` keeps it as a version. Another team's staged upload is a 404."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.accounts.permissions import acting_user
from webapp.core.api import error_responses

from . import services, staging
from .apis import DatasetListCreateApi, DatasetOutputSerializer, VersionOutputSerializer, read_upload
from .models import StagedUpload


class StagedOutputSerializer(serializers.ModelSerializer[StagedUpload]):
    team: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    detected_shape = serializers.CharField(source="shape", read_only=True)
    rows = serializers.ListField(
        child=serializers.DictField(), read_only=True, help_text="The first records as they will be read."
    )
    existing = serializers.SerializerMethodField(
        help_text="The team's version that already holds the same content (confirming keeps nothing new), or null."
    )

    class Meta:
        model = StagedUpload
        fields = (
            "id", "team", "name", "kind", "split", "source_name", "source_format", "detected_shape", "ids_from",
            "mapping", "records", "size_bytes", "sha256", "lengths", "rows", "existing", "created_at", "expires_at",
        )  # fmt: skip

    def get_existing(self, staged: StagedUpload) -> dict[str, Any] | None:
        version = staging.staged_existing(staged)
        if version is None:
            return None
        return {"reference": f"data:{version.dataset.name}", "number": version.number, "dataset": version.dataset_id}


class UploadPreviewApi(APIView):
    parser_classes = (MultiPartParser,)

    @extend_schema(
        request={"multipart/form-data": DatasetListCreateApi.UploadInput},
        responses={201: StagedOutputSerializer, **error_responses(400, 403, 413)},
        operation_id="datasets_preview",
        description="Check a file as an upload is checked (the same 400s and 413s) and stage it for an hour: the "
        "answer shows its first rows as they will be read, its detected shape and where its ids come from. Nothing "
        "is kept until `POST /api/v1/datasets/staged/<id>/confirm/`; a team holds at most three staged uploads.",
    )
    def post(self, request: Request) -> Response:
        upload = read_upload(request)
        if upload is None:
            return Response({"detail": services.too_large_message()}, status=413)
        staged = staging.upload_stage(**upload)
        return Response(StagedOutputSerializer(staged).data, status=201)


class StagedUploadApi(APIView):
    @extend_schema(
        responses={200: StagedOutputSerializer, **error_responses(404)},
        operation_id="datasets_staged_read",
        description="A staged upload of your team: its first rows, shape and counts.",
    )
    def get(self, request: Request, staged_id: UUID) -> Response:
        staged = staging.staged_get(user=acting_user(request), staged_id=staged_id)
        return Response(StagedOutputSerializer(staged).data)

    @extend_schema(
        request=None,
        responses={204: None, **error_responses(403, 404)},
        operation_id="datasets_staged_discard",
        description="Discard a staged upload: its file is deleted.",
    )
    def delete(self, request: Request, staged_id: UUID) -> Response:
        user = acting_user(request)
        staging.staged_discard(staged=staging.staged_get(user=user, staged_id=staged_id), user=user)
        return Response(status=204)


class StagedConfirmApi(APIView):
    @extend_schema(
        request=None,
        responses={201: VersionOutputSerializer, 200: VersionOutputSerializer, **error_responses(400, 403, 404)},
        operation_id="datasets_staged_confirm",
        description="Keep a staged upload as the next version of its dataset (201), or as the version that already "
        "holds the same content (200); the answer is an upload's. 404 once confirmed, discarded or expired.",
    )
    def post(self, request: Request, staged_id: UUID) -> Response:
        user = acting_user(request)
        uploaded = staging.staged_confirm(staged=staging.staged_get(user=user, staged_id=staged_id), user=user)
        body = VersionOutputSerializer(uploaded.version).data | {
            "dataset": DatasetOutputSerializer(uploaded.version.dataset).data,
            "created": uploaded.created,
            "detected_shape": uploaded.shape,
            "ids_from": uploaded.ids,
        }
        return Response(body, status=201 if uploaded.created else 200)
