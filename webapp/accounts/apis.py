"""REST API for accounts: the teams the caller belongs to, with their role in each, and each team's stored API keys
(names only: a stored value is never sent back)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.core.api import error_responses

from .models import Role
from .permissions import acting_user, require_role
from .selectors import team_get, team_list, team_secret_list
from .services import team_secret_delete, team_secret_set


class TeamListApi(APIView):
    class TeamOutput(serializers.Serializer[Any]):
        slug = serializers.SlugField()
        name = serializers.CharField()
        role = serializers.CharField()

    @extend_schema(responses={200: TeamOutput(many=True), **error_responses()}, operation_id="teams_list")
    def get(self, request: Request) -> Response:
        user = acting_user(request)
        return Response(self.TeamOutput(team_list(user=user), many=True).data)


class TeamSecretOutput(serializers.Serializer[Any]):
    name = serializers.CharField()
    created_by = serializers.CharField(source="created_by.username", read_only=True, allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class TeamSecretListApi(APIView):
    """The team's stored API keys. POST stores one (or replaces the key of that name); no response carries it."""

    class TeamSecretInput(serializers.Serializer[Any]):
        name = serializers.CharField(max_length=64)
        value = serializers.CharField(max_length=4096, trim_whitespace=False, write_only=True)

    @extend_schema(
        responses={200: TeamSecretOutput(many=True), **error_responses(404)}, operation_id="team_secrets_list"
    )
    def get(self, request: Request, slug: str) -> Response:
        user = acting_user(request)
        team = team_get(user=user, slug=slug)
        require_role(user, team, Role.VIEWER)
        return Response(TeamSecretOutput(team_secret_list(team=team), many=True).data)

    @extend_schema(
        request=TeamSecretInput,
        responses={201: TeamSecretOutput, **error_responses(400, 403, 404, 413)},
        operation_id="team_secrets_set",
    )
    def post(self, request: Request, slug: str) -> Response:
        user = acting_user(request)
        team = team_get(user=user, slug=slug)
        data = self.TeamSecretInput(data=request.data)
        data.is_valid(raise_exception=True)
        secret = team_secret_set(team=team, user=user, **data.validated_data)
        return Response(TeamSecretOutput(secret).data, status=201)


class TeamSecretDetailApi(APIView):
    @extend_schema(request=None, responses={204: None, **error_responses(403, 404)}, operation_id="team_secrets_delete")
    def delete(self, request: Request, slug: str, name: str) -> Response:
        user = acting_user(request)
        team_secret_delete(team=team_get(user=user, slug=slug), user=user, name=name)
        return Response(status=204)
