"""What the API answers without a run: every preset's whole config, and the ping of health checks."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.accounts.permissions import acting_user
from webapp.core.api import error_responses

from ..configs import PRESET_NAMES, config_compose
from ..outputs import PresetsOutputSerializer


class PingApi(APIView):
    """A trivial authenticated endpoint: health checks, and the baseline of bench/api.py."""

    @extend_schema(
        responses={200: inline_serializer("Ping", {"ok": serializers.BooleanField()}), **error_responses()},
        operation_id="ping",
    )
    def get(self, request: Request) -> Response:
        acting_user(request)
        return Response({"ok": True})


class PresetListApi(APIView):
    @extend_schema(
        responses={200: PresetsOutputSerializer, **error_responses()},
        operation_id="presets_list",
        description="Every preset's whole config, by name.",
    )
    def get(self, request: Request) -> Response:
        presets = {name: config_compose(preset=name).to_dict() for name in PRESET_NAMES}
        return Response(PresetsOutputSerializer(presets).data)
