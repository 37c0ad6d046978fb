"""Acting on a run: cancel, resume, clone, evaluate a checkpoint, steer its population (control requests) and
acknowledge a collapse alarm. Each calls its service, which checks the caller's role and the run's state."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from inspo_engine.config import MAX_INSTRUCTION_CHARS
from webapp.accounts.models import User
from webapp.accounts.permissions import acting_user
from webapp.core.api import ConfigField, error_responses

from .. import selectors, services
from ..models import ControlRequest, Run
from ..outputs import (
    AlarmOutputSerializer,
    ControlRequestOutputSerializer,
    EvaluationRequestOutputSerializer,
    RunOutputSerializer,
)
from .runs import TagsField

INSTRUCTION_ID = r"^ins-[0-9]{4,9}$"
"""An engine instruction id."""


class AlarmAcknowledgeApi(APIView):
    @extend_schema(
        request=None,
        responses={200: AlarmOutputSerializer, **error_responses(403, 404)},
        operation_id="runs_alarm_acknowledge",
        description="Mark a collapse alarm as seen: the run page no longer shows its banner. 403 for a viewer; "
        "acknowledging again keeps the first acknowledgement.",
    )
    def post(self, request: Request, run_id: str, alarm_id: int) -> Response:
        user = acting_user(request)
        run = selectors.run_get(user=user, run_id=run_id)
        alarm = services.alarm_acknowledge(run=run, user=user, alarm=selectors.alarm_get(run=run, alarm_id=alarm_id))
        return Response(AlarmOutputSerializer(selectors.alarm_row(alarm)).data)


# -- actions -----------------------------------------------------------------------------------------------------


class RunActionApi(APIView):
    """POST an action on a run of the caller's teams (404 for another team's): `act` calls its service, which
    checks the caller's role (403 for a viewer) and the run's state (409), and the run is sent back as it is now."""

    def act(self, run: Run, user: User) -> Run:
        raise NotImplementedError

    def post(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        run = self.act(selectors.run_get(user=user, run_id=run_id), user)
        return Response(RunOutputSerializer(run).data)


@extend_schema_view(
    post=extend_schema(
        request=None,
        responses={200: RunOutputSerializer, **error_responses(403, 404, 409)},
        operation_id="runs_cancel",
        description="A queued run is cancelled at once; a running one becomes cancelling and stops after its step.",
    )
)
class RunCancelApi(RunActionApi):
    def act(self, run: Run, user: User) -> Run:
        return services.run_cancel(run=run, user=user)


@extend_schema_view(
    post=extend_schema(
        request=None,
        responses={200: RunOutputSerializer, **error_responses(403, 404, 409)},
        operation_id="runs_resume",
        description="A failed or cancelled run is queued again and continues from its newest checkpoint; 429 when its "
        "team is at its active-run quota.",
    )
)
class RunResumeApi(RunActionApi):
    def act(self, run: Run, user: User) -> Run:
        return services.run_resume(run=run, user=user)


class RunCloneApi(APIView):
    class RunCloneInput(serializers.Serializer[Any]):
        name = serializers.CharField(max_length=200, required=False)
        tags = TagsField
        overrides = ConfigField(required=False)

    @extend_schema(
        request=RunCloneInput,
        responses={201: RunOutputSerializer, **error_responses(400, 403, 404, 413)},
        operation_id="runs_clone",
    )
    def post(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        data = self.RunCloneInput(data=request.data)
        data.is_valid(raise_exception=True)
        run = services.run_clone(
            run=selectors.run_get(user=user, run_id=run_id),
            user=user,
            **data.validated_data,
        )
        return Response(RunOutputSerializer(run).data, status=201)


class RunEvaluateApi(APIView):
    class RunEvaluateInput(serializers.Serializer[Any]):
        benchmarks = serializers.ListField(child=serializers.CharField(max_length=200), min_length=1, max_length=20)
        checkpoint = serializers.IntegerField(required=False, min_value=1, help_text="Default: the newest.")
        limit = serializers.IntegerField(required=False, min_value=1, max_value=100_000)

    @extend_schema(
        request=RunEvaluateInput,
        responses={202: EvaluationRequestOutputSerializer, **error_responses(400, 403, 404, 409, 410, 413)},
        operation_id="runs_evaluate",
    )
    def post(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        data = self.RunEvaluateInput(data=request.data)
        data.is_valid(raise_exception=True)
        run = selectors.run_get(user=user, run_id=run_id)
        values = data.validated_data
        checkpoint = None
        if "checkpoint" in values:
            checkpoint = selectors.checkpoint_get(run=run, checkpoint_id=values["checkpoint"])
        evaluation = services.run_evaluate(
            run=run,
            user=user,
            benchmarks=values["benchmarks"],
            checkpoint=checkpoint,
            limit=values.get("limit"),
        )
        return Response(EvaluationRequestOutputSerializer(evaluation).data, status=202)


class RunControlApi(APIView):
    """A run's control requests: steer its population while it is queued or running."""

    class ControlInput(serializers.Serializer[Any]):
        kind = serializers.ChoiceField(
            choices=ControlRequest.Kind.choices,
            help_text="inject a hand-written instruction; pin one so pruning never drops it; unpin it; retire one now.",
        )
        text = serializers.CharField(
            required=False, max_length=MAX_INSTRUCTION_CHARS, help_text="inject only: the instruction."
        )
        verify = serializers.BooleanField(
            required=False,
            default=True,
            help_text="inject only: verify it like the optimizer's candidates, against I* (false: skip verification "
            "and join unscored).",
        )
        instruction_id = serializers.RegexField(
            INSTRUCTION_ID, required=False, max_length=32, help_text="pin, unpin, retire: the instruction (ins-0003)."
        )

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            inject = attrs["kind"] == ControlRequest.Kind.INJECT
            needed, unwanted = ("text", "instruction_id") if inject else ("instruction_id", "text")
            errors = {}
            if needed not in attrs:
                errors[needed] = [f"required for {attrs['kind']}"]
            if unwanted in attrs:
                errors[unwanted] = [f"not for {attrs['kind']}"]
            if errors:
                raise serializers.ValidationError(errors)
            return attrs

    @extend_schema(
        responses={200: ControlRequestOutputSerializer(many=True), **error_responses(404)},
        operation_id="runs_control_list",
        description="The run's control requests, newest first: pending, or applied or rejected by the engine before "
        "a step, with its outcome.",
    )
    def get(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        run = selectors.run_get(user=user, run_id=run_id)
        return Response(ControlRequestOutputSerializer(selectors.control_request_rows(run=run), many=True).data)

    @extend_schema(
        request=ControlInput,
        responses={201: ControlRequestOutputSerializer, **error_responses(400, 403, 404, 409, 413)},
        operation_id="runs_control_create",
        description="Ask the engine to inject an instruction, or to pin, unpin or retire one, at its next step "
        "boundary; the request is pending until then. 403 for a viewer; 409 unless the run is queued or running.",
    )
    def post(self, request: Request, run_id: str) -> Response:
        user = acting_user(request)
        data = self.ControlInput(data=request.data)
        data.is_valid(raise_exception=True)
        run = selectors.run_get(user=user, run_id=run_id)
        created = services.control_request_create(run=run, user=user, **data.validated_data)
        return Response(ControlRequestOutputSerializer(selectors.control_request_row(created)).data, status=201)
