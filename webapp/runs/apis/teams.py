"""A team's default trackers: the tracking section its runs get when they name none (docs/tracking.md)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.accounts.permissions import acting_user
from webapp.accounts.selectors import team_get
from webapp.core.api import ConfigField, error_responses

from .. import selectors, services
from ..outputs import TeamTrackingOutputSerializer, TrackingSectionSerializer


@extend_schema_field(TrackingSectionSerializer)
class TrackingSectionField(ConfigField):
    """A run config's tracking section as a JSON object, or null; the engine checks what is inside."""

    def to_internal_value(self, data: Any) -> Any:
        return None if data is None else super().to_internal_value(data)


# -- a team's default trackers ------------------------------------------------------------------------------------


class TeamTrackingApi(APIView):
    """The team's default trackers: the tracking section of its runs that name none (docs/tracking.md). Everyone in
    the team reads it; owners set it."""

    class TeamTrackingInput(serializers.Serializer[Any]):
        tracking = TrackingSectionField(
            allow_null=True,
            help_text="The whole section (fields left out take the engine's defaults); null or {} removes it.",
        )

    @extend_schema(
        responses={200: TeamTrackingOutputSerializer, **error_responses(404)},
        operation_id="team_tracking_get",
        description="The team's default trackers; `tracking` is null when it has none.",
    )
    def get(self, request: Request, slug: str) -> Response:
        team = team_get(user=acting_user(request), slug=slug)
        return Response(TeamTrackingOutputSerializer({"tracking": selectors.team_tracking(team=team)}).data)

    @extend_schema(
        request=TeamTrackingInput,
        responses={200: TeamTrackingOutputSerializer, **error_responses(400, 403, 404, 413)},
        operation_id="team_tracking_set",
        description="Replace the team's default trackers (owners only; 403 otherwise). It is checked as a run's "
        "tracking is at submission: 400 names each bad field (`tracking.mlflow_uri`, …). A run whose config and "
        "overrides name no tracking field gets it when submitted.",
    )
    def put(self, request: Request, slug: str) -> Response:
        user = acting_user(request)
        team = team_get(user=user, slug=slug)
        data = self.TeamTrackingInput(data=request.data)
        data.is_valid(raise_exception=True)
        services.team_tracking_set(team=team, user=user, tracking=data.validated_data["tracking"])
        return Response(TeamTrackingOutputSerializer({"tracking": selectors.team_tracking(team=team)}).data)
