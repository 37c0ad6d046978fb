"""Server-rendered pages for experiments: the list, the New experiment form (with the cost estimate the API also
answers), one experiment (its table, verdicts, machines, runs, the shell its charts mount on, and the API's own JSON
of it for the charts) and cancel. They call the same services and selectors as the API; the charts and the live
refresh are drawn in the browser by the bundle built from frontend/."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from webapp.accounts.models import Role
from webapp.accounts.permissions import acting_user, role_of
from webapp.accounts.selectors import team_list
from webapp.core.errors import InvalidInput, ServiceError
from webapp.runs.forms import retriever_states, retriever_status
from webapp.runs.selectors import MAX_COMPARED_RUNS

from . import selectors, services
from .forms import ExperimentForm
from .models import Experiment
from .outputs import ExperimentDetailOutputSerializer


@login_required
def experiment_list(request: HttpRequest) -> HttpResponse:
    user = acting_user(request)
    experiments = selectors.experiment_list(user=user).prefetch_related("runs")
    page = Paginator(experiments, 25).get_page(request.GET.get("page"))
    rows = [{"experiment": e, "state": selectors.experiment_state(experiment=e, runs=list(e.runs.all()))} for e in page]
    can_submit = team_list(user=user, min_role=Role.MEMBER).exists()
    return render(request, "experiments/list.html", {"page": page, "rows": rows, "can_submit": can_submit})


@login_required
def experiment_new(request: HttpRequest) -> HttpResponse:
    user = acting_user(request)
    teams = team_list(user=user, min_role=Role.MEMBER)
    if not teams.exists():
        raise PermissionDenied("Viewers cannot start experiments: ask a team owner for the member role.")
    form = ExperimentForm(request.POST or None, teams=teams, initial={"team": teams.first()})
    if request.method == "POST" and form.is_valid():
        try:
            experiment = services.experiment_submit(
                team=form.cleaned_data["team"], user=user, name=form.cleaned_data["name"], spec=form.spec()
            )
        except InvalidInput as error:
            form.apply_errors(error)
        else:
            messages.success(request, f"Experiment “{experiment.name}” started: {experiment.run_count} runs.")
            return redirect("experiments:detail", experiment_id=experiment.pk)
    seeds = str(form["seeds"].value() or 0)
    chosen = teams.filter(pk=form["team"].value()).first() if str(form["team"].value()).isdigit() else None
    spec = form.spec() if form.is_bound and form.is_valid() else {}
    estimate = selectors.experiment_estimate(
        team=chosen or teams.first(),
        preset=str(form["preset"].value() or "smoke"),
        arms=len(form["arms"].value() or []),
        seeds=int(seeds) if seeds.isdigit() else 0,
        overrides=spec.get("overrides"),
        evaluation=spec.get("evaluation"),
    )
    states = retriever_states(teams)
    context = {
        "form": form,
        "index_states": json.dumps(states),
        "index_status": retriever_status(
            states, preset=form["preset"].value(), corpus=form["corpus"].value(), retriever=form["retriever"].value()
        ),
        "estimate": estimate,
        "team_slugs": json.dumps({str(team.pk): team.slug for team in teams}),
        "can_submit": True,
    }
    return render(request, "experiments/new.html", context, status=400 if request.method == "POST" else 200)


def _compare_url(runs: list[Any]) -> str | None:
    """The compare page on the experiment's runs (the first MAX_COMPARED_RUNS of them); None for fewer than two."""
    chosen = [run for run in runs][:MAX_COMPARED_RUNS]
    if len(chosen) < 2:
        return None
    return reverse("runs:compare") + "?" + "&".join(f"runs={run.pk}" for run in chosen)


@login_required
def experiment_detail(request: HttpRequest, experiment_id: int) -> HttpResponse:
    user = acting_user(request)
    experiment = selectors.experiment_get(user=user, experiment_id=experiment_id)
    exclude = request.GET.get("exclude_overlap") == "1"
    summary = selectors.experiment_summary(experiment=experiment, exclude_overlap=exclude)
    role = role_of(user, experiment.team)
    context = {
        **summary,
        "detail": ExperimentDetailOutputSerializer(summary).data,
        "can_act": role is not None and role.rank >= Role.MEMBER.rank,
        "several_benchmarks": len(summary["results"]["benchmarks"]) > 1,
        "any_leak": any(row["leaked"] for row in summary["leakage"]),
        "run_rows": list(zip(summary["runs"], summary["timing"]["runs"], strict=True)),
        "compare_url": _compare_url(summary["runs"]),
        "compared_runs": min(len(summary["runs"]), MAX_COMPARED_RUNS),
        "can_submit": team_list(user=user, min_role=Role.MEMBER).exists(),
    }
    return render(request, "experiments/detail.html", context)


@login_required
@require_POST
def experiment_cancel(request: HttpRequest, experiment_id: int) -> HttpResponse:
    user = acting_user(request)
    experiment: Experiment = selectors.experiment_get(user=user, experiment_id=experiment_id)
    try:
        services.experiment_cancel(experiment=experiment, user=user)
    except ServiceError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, "Experiment cancelled: its runs stop (running ones after their current step).")
    return redirect("experiments:detail", experiment_id=experiment.pk)
