"""REST API for accounts: the teams the caller belongs to, with their role in each."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .permissions import acting_user
from .selectors import team_list


class TeamListApi(APIView):
    class TeamOutput(serializers.Serializer[Any]):
        slug = serializers.SlugField()
        name = serializers.CharField()
        role = serializers.CharField()

    @extend_schema(responses=TeamOutput(many=True), operation_id="teams_list")
    def get(self, request: Request) -> Response:
        user = acting_user(request)
        return Response(self.TeamOutput(team_list(user=user), many=True).data)
