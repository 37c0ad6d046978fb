"""Server-rendered pages for runs: list, submit, detail (metrics, population, lineage, evaluations, checkpoints),
trajectories, and the cancel/clone/resume/evaluate actions. They call the same services and selectors as the API.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from webapp.accounts.models import Role
from webapp.accounts.permissions import acting_user, role_of
from webapp.accounts.selectors import team_list
from webapp.core.errors import InvalidInput, ServiceError

from . import selectors, services
from .forms import CloneForm, EvaluateForm, RunForm
from .models import Run


def _submittable_teams(user: Any) -> Any:
    return team_list(user=user, min_role=Role.MEMBER)


@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    user = acting_user(request)
    filters = {key: request.GET.get(key) or None for key in ("status", "tag", "creator", "team")}
    if filters["status"] not in Run.Status.values:
        filters["status"] = None
    runs = selectors.run_list(user=user, **filters)
    page = Paginator(runs, 25).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "filters": filters,
        "statuses": Run.Status.values,
        "can_submit": _submittable_teams(user).exists(),
    }
    return render(request, "runs/list.html", context)


@login_required
def run_new(request: HttpRequest) -> HttpResponse:
    user = acting_user(request)
    teams = _submittable_teams(user)
    if not teams.exists():
        raise PermissionDenied("Viewers cannot submit runs: ask a team owner for the member role.")
    form = RunForm(request.POST or None, teams=teams, initial={"team": teams.first()})
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        assert form.config is not None
        try:
            run = services.run_submit(
                team=data["team"],
                user=user,
                name=data["name"],
                config=form.config,
                tags=data["tag_list"],
                preset=data["preset"],
            )
        except InvalidInput as error:
            form.apply_config_errors(error)
        else:
            messages.success(request, f"Run “{run.name}” queued on the {run.queue} queue.")
            return redirect("runs:detail", run_id=run.pk)
    status = 400 if request.method == "POST" else 200
    return render(request, "runs/new.html", {"form": form}, status=status)


@login_required
def run_detail(request: HttpRequest, run_id: str) -> HttpResponse:
    user = acting_user(request)
    run = selectors.run_get(user=user, run_id=run_id)
    role = role_of(user, run.team)
    metrics = run.steps.order_by("-step")[:50]
    history = selectors.run_population_history(run=run)
    lineage = selectors.run_lineage(run=run)
    context = {
        "run": run,
        "can_act": role is not None and role.rank >= Role.MEMBER.rank,
        "tags": selectors.run_tag_names(run=run),
        "config_json": _pretty(run.config),
        "metrics": list(reversed(metrics)),
        "population": history[-1] if history else None,
        "lineage": lineage,
        "evaluations": selectors.run_evaluations(run=run),
        "evaluation_requests": selectors.evaluation_request_list(run=run)[:20],
        "checkpoints": selectors.checkpoint_list(run=run),
        "notes": selectors.run_notes(run=run),
        "best": selectors.best_instruction(run=run),
        "clone_form": CloneForm(),
        "evaluate_form": EvaluateForm(),
    }
    return render(request, "runs/detail.html", context)


def _pretty(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)


@login_required
def run_trajectories(request: HttpRequest, run_id: str) -> HttpResponse:
    user = acting_user(request)
    run = selectors.run_get(user=user, run_id=run_id)
    try:
        step = int(request.GET["step"]) if request.GET.get("step") else None
    except ValueError:
        step = None
    data = selectors.run_trajectories(run=run, step=step)
    steps = list(run.trajectories.order_by("step").values_list("step", flat=True).distinct())
    return render(request, "runs/trajectories.html", {"run": run, "data": data, "steps": steps})


def _errors_text(form: Any) -> str:
    return "; ".join(f"{field}: {' '.join(str(m) for m in errors)}" for field, errors in form.errors.items())


def _act(request: HttpRequest, run: Run, action: Any, done: str) -> HttpResponse:
    try:
        result = action()
    except ServiceError as error:
        messages.error(request, error.message)
        return redirect("runs:detail", run_id=run.pk)
    messages.success(request, done)
    target = result if isinstance(result, Run) else run
    return redirect("runs:detail", run_id=target.pk)


@login_required
@require_POST
def run_cancel(request: HttpRequest, run_id: str) -> HttpResponse:
    user = acting_user(request)
    run = selectors.run_get(user=user, run_id=run_id)
    return _act(request, run, lambda: services.run_cancel(run=run, user=user), "Cancellation requested.")


@login_required
@require_POST
def run_resume(request: HttpRequest, run_id: str) -> HttpResponse:
    user = acting_user(request)
    run = selectors.run_get(user=user, run_id=run_id)
    return _act(request, run, lambda: services.run_resume(run=run, user=user), "Run queued to resume.")


@login_required
@require_POST
def run_clone(request: HttpRequest, run_id: str) -> HttpResponse:
    user = acting_user(request)
    run = selectors.run_get(user=user, run_id=run_id)
    form = CloneForm(request.POST)
    if not form.is_valid():
        messages.error(request, _errors_text(form))
        return redirect("runs:detail", run_id=run.pk)
    data = form.cleaned_data

    def clone() -> Run:
        return services.run_clone(
            run=run,
            user=user,
            name=data["name"] or None,
            tags=data["tag_list"],
            overrides=data["overrides"],
        )

    return _act(request, run, clone, "Clone queued.")


@login_required
@require_POST
def run_evaluate(request: HttpRequest, run_id: str) -> HttpResponse:
    user = acting_user(request)
    run = selectors.run_get(user=user, run_id=run_id)
    form = EvaluateForm(request.POST)
    if not form.is_valid():
        messages.error(request, _errors_text(form))
        return redirect("runs:detail", run_id=run.pk)
    data = form.cleaned_data

    def evaluate() -> Any:
        checkpoint = None
        if data.get("checkpoint"):
            checkpoint = selectors.checkpoint_get(run=run, checkpoint_id=data["checkpoint"])
        return services.run_evaluate(
            run=run,
            user=user,
            benchmarks=data["benchmarks"],
            checkpoint=checkpoint,
            limit=data.get("limit"),
        )

    return _act(request, run, evaluate, "Evaluation queued.")
