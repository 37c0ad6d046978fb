"""Server-rendered pages for runs: list, submit, detail, lineage, trajectories, compare, and the
cancel/clone/resume/evaluate actions. They call the same services and selectors as the API. The charts, the lineage
graph and the trajectory viewer are drawn in the browser from the API by the bundle built from frontend/; these views
render the shell it mounts on and everything that must work without it (actions, downloads, checkpoints).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any
from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from webapp.accounts.models import Role
from webapp.accounts.permissions import acting_user, require_role, role_of
from webapp.accounts.selectors import team_get, team_list
from webapp.core.errors import InvalidInput, QuotaExceeded, ServiceError
from webapp.data import leakage
from webapp.data.indexing import index_waits
from webapp.data.reach_views import reach_states, run_reach_row

from . import heatmaps, learnt, selectors, services
from .configs import PRESET_NAMES
from .forms import (
    CloneForm,
    ControlForm,
    EvaluateForm,
    HeatmapForm,
    RunForm,
    TeamTrackingForm,
    default_run_name,
    preset_field_texts,
    retriever_states,
    retriever_status,
)
from .models import Checkpoint, Run


def _submittable_teams(user: Any) -> Any:
    return team_list(user=user, min_role=Role.MEMBER)


# Sortable columns of the runs list: (label, field); a click sorts by the field, a second click reverses it.
LIST_COLUMNS = (
    ("Name", "name"),
    ("Status", "status"),
    ("Progress", "step"),
    ("Preset", None),
    ("Team", None),
    ("Tags", None),
    ("Creator", None),
    ("Created", "created_at"),
)
ORDERING_LABELS = {
    "-created_at": "newest first",
    "created_at": "oldest first",
    "name": "name A–Z",
    "-name": "name Z–A",
    "status": "status A–Z",
    "-status": "status Z–A",
    "-step": "most steps first",
    "step": "fewest steps first",
}


def _list_columns(ordering: str) -> list[dict[str, Any]]:
    columns = []
    for label, field in LIST_COLUMNS:
        sorted_ = None
        if field and ordering.lstrip("-") == field:
            sorted_ = "descending" if ordering.startswith("-") else "ascending"
        sort = None
        if field:
            sort = f"-{field}" if sorted_ == "ascending" or (sorted_ is None and field == "created_at") else field
        columns.append({"label": label, "sort": sort, "sorted": sorted_})
    return columns


@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    user = acting_user(request)
    filters = {key: request.GET.get(key) or None for key in ("status", "tag", "creator", "team", "preset")}
    if filters["status"] not in Run.Status.values:
        filters["status"] = None
    ordering = request.GET.get("ordering") or "-created_at"
    if ordering not in selectors.RUN_ORDERINGS:
        ordering = "-created_at"
    runs = selectors.run_list(user=user, ordering=ordering, **filters)
    page = Paginator(runs, 25).get_page(request.GET.get("page"))
    acting_teams = set(_submittable_teams(user).values_list("pk", flat=True))
    shown: list[Run] = list(page)
    resumable = _resumable(shown)
    rows = [{"run": run, "can_act": run.team_id in acting_teams, "can_resume": run.pk in resumable} for run in shown]
    context = {
        "page": page,
        "rows": rows,
        "filters": filters,
        "filtered": any(filters.values()),
        "ordering": ordering,
        "orderings": [(value, ORDERING_LABELS[value]) for value in selectors.RUN_ORDERINGS],
        "columns": _list_columns(ordering),
        "statuses": Run.Status.values,
        "presets": PRESET_NAMES,
        "can_submit": bool(acting_teams),
        "any_actionable": any(run.team_id in acting_teams and run.is_active for run in shown),
    }
    return render(request, "runs/list.html", context)


def _resumable(runs: list[Run]) -> set[Any]:
    """The ids of those runs that Resume can continue: failed or cancelled, with a checkpoint still on disk (a run
    that never wrote one has nothing to resume from: clone it instead)."""
    stopped = [run.pk for run in runs if run.status in Run.RESUMABLE]
    if not stopped:
        return set()
    return set(Checkpoint.objects.filter(run__in=stopped, available=True).values_list("run_id", flat=True))


@login_required
def run_new(request: HttpRequest) -> HttpResponse:
    user = acting_user(request)
    teams = _submittable_teams(user)
    if not teams.exists():
        raise PermissionDenied("Viewers cannot submit runs: ask a team owner for the member role.")
    preset = str(RunForm.base_fields["preset"].initial)
    initial = {"team": teams.first(), "name": default_run_name(preset, timezone.localtime())}
    form = RunForm(request.POST or None, teams=teams, initial=initial)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            run = services.run_submit(
                team=data["team"],
                user=user,
                name=data["name"],
                preset=data["preset"],
                overrides=data["config_overrides"],
                tags=data["tag_list"],
            )
        except InvalidInput as error:
            form.apply_config_errors(error)
        except QuotaExceeded as error:
            form.add_error(None, error.message)
        else:
            messages.success(request, f"Run “{run.name}” queued on the {run.queue} queue.")
            return redirect("runs:detail", run_id=run.pk)
    status = 400 if request.method == "POST" else 200
    presets = preset_field_texts()
    chosen = form["preset"].value()
    chosen = chosen if chosen in presets else PRESET_NAMES[0]
    form.show_preset(presets[chosen])
    states = retriever_states(teams)
    index_status = retriever_status(
        states, preset=chosen, corpus=form["corpus"].value(), retriever=form["retriever"].value()
    )
    context = {
        "form": form,
        "preset_texts": json.dumps(presets),
        "index_states": json.dumps(states),
        "index_status": index_status,
        "reach_states": reach_states(teams),
    }
    return render(request, "runs/new.html", context, status=status)


@login_required
def team_tracking(request: HttpRequest, slug: str) -> HttpResponse:
    """The team's default trackers: everyone in the team sees them, owners change or remove them (403 for others,
    404 outside the team)."""
    user = acting_user(request)
    team = team_get(user=user, slug=slug)
    current = selectors.team_tracking(team=team)
    form = TeamTrackingForm(request.POST or None, initial=current or {})
    if request.method == "POST":
        require_role(user, team, Role.OWNER)
        try:
            if "remove" in request.POST:
                services.team_tracking_set(team=team, user=user, tracking=None)
                messages.success(request, f"{team.name} has no default trackers now.")
                return redirect("runs:team-tracking", slug=team.slug)
            if form.is_valid():
                services.team_tracking_set(team=team, user=user, tracking=form.section())
                messages.success(request, f"Saved the default trackers of {team.name}.")
                return redirect("runs:team-tracking", slug=team.slug)
        except InvalidInput as error:
            form.apply_errors(error)
    context = {"team": team, "current": current, "form": form, "is_owner": role_of(user, team) == Role.OWNER}
    return render(request, "runs/team_tracking.html", context, status=400 if form.errors else 200)


@login_required
def run_detail(request: HttpRequest, run_id: str) -> HttpResponse:
    user = acting_user(request)
    return _detail_page(request, selectors.run_get(user=user, run_id=run_id))


def _detail_page(request: HttpRequest, run: Run, *, evaluate_form: EvaluateForm | None = None) -> HttpResponse:
    """The run's page. With a bound `evaluate_form` that was refused: the page again, status 400, with that form
    open beside its errors and what was typed into it."""
    user = acting_user(request)
    context = {
        "run": run,
        "can_act": _can_act(user, run),
        "can_resume": bool(_resumable([run])),
        "can_submit": _submittable_teams(user).exists(),
        "tags": selectors.run_tag_names(run=run),
        "config_json": _pretty(run.config),
        "evaluations": selectors.run_evaluations(run=run),
        **_table_and_leakage(run, request.GET.get("table_step"), request.GET.get("exclude_overlap") == "1"),
        "evaluation_requests": selectors.evaluation_request_list(run=run)[:20],
        "checkpoints": selectors.checkpoint_list(run=run),
        "notes": selectors.run_notes(run=run),
        "learnt": learnt.run_learnt(run=run),
        "reach": run_reach_row(run),
        "best": selectors.best_instruction(run=run),
        "clone_form": CloneForm(),
        "evaluate_form": evaluate_form or EvaluateForm(),
        "evaluate_open": evaluate_form is not None,
        **_heatmap_context(run),
        "steerable": run.status in services.STEERABLE,
        "living": selectors.run_living_instructions(run=run),
        "control_requests": selectors.control_request_rows(run=run)[:50],
        "control_form": ControlForm(initial={"kind": "inject"}),
        "index_waits": index_waits(run=run) if run.status == Run.Status.QUEUED else [],
    }
    return render(request, "runs/detail.html", context, status=400 if evaluate_form is not None else 200)


def _benchmark_table(
    run: Run, asked: str | None, exclude: Mapping[str, frozenset[str]] | None = None
) -> dict[str, Any]:
    """The run's Table 1 at the step the address asks for (`?table_step=`), else its final evaluation; a step that is
    no number or has no evaluation shows the final one, and says why. With `exclude`, without those questions."""
    if not asked:
        return {**selectors.run_benchmark_table(run=run, exclude=exclude), "error": None}
    try:
        if not asked.isdigit():
            raise InvalidInput({"step": [f"{asked[:20]!r} is not a step"]})
        return {**selectors.run_benchmark_table(run=run, step=int(asked), exclude=exclude), "error": None}
    except InvalidInput as error:
        return {**selectors.run_benchmark_table(run=run, exclude=exclude), "error": " ".join(error.errors["step"])}


def _table_and_leakage(run: Run, asked: str | None, exclude_overlap: bool) -> dict[str, Any]:
    """Table 1 (each benchmark marked with what it shares with the training split, and without those questions when
    `exclude_overlap`), and the leakage report of every benchmark of the run's config or table."""
    rows = leakage.config_leakage(run.config, team=run.team, benchmarks=selectors.run_benchmark_names(run=run))
    by_name = {row.benchmark: row.report for row in rows}
    overlapping = leakage.excluded_questions(rows)
    table = _benchmark_table(run, asked, overlapping if exclude_overlap else None)
    for cell in table["benchmarks"]:
        cell["leakage"] = by_name.get(cell["benchmark"])
    return {"table": table, "leakage": rows, "exclude_overlap": exclude_overlap, "any_leak": bool(overlapping)}


def _heatmap_choices(run: Run) -> dict[str, Any]:
    steps = selectors.checkpoint_list(run=run).filter(available=True).values_list("step", flat=True)
    return {"instructions": heatmaps.heatmap_instruction_choices(run=run), "steps": list(steps)}


def _heatmap_context(run: Run) -> dict[str, Any]:
    """The heatmap form (with the run's instructions and checkpoints to choose from) and the cost it may reach."""
    return {"heatmap_form": HeatmapForm(**_heatmap_choices(run)), "heatmap_max_answers": heatmaps.max_answers()}


def _can_act(user: Any, run: Run) -> bool:
    role = role_of(user, run.team)
    return role is not None and role.rank >= Role.MEMBER.rank


def _pretty(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)


@login_required
def run_lineage(request: HttpRequest, run_id: str) -> HttpResponse:
    user = acting_user(request)
    run = selectors.run_get(user=user, run_id=run_id)
    return render(request, "runs/lineage.html", {"run": run, "can_submit": _submittable_teams(user).exists()})


@login_required
def run_trajectories(request: HttpRequest, run_id: str) -> HttpResponse:
    user = acting_user(request)
    run = selectors.run_get(user=user, run_id=run_id)
    steps = list(run.trajectories.order_by("step").values_list("step", flat=True).distinct())
    try:
        step = int(request.GET["step"]) if request.GET.get("step") else None
    except ValueError:
        step = None
    context = {
        "run": run,
        "steps": steps,
        # The newest step unless the address names one that has trajectories.
        "step": step if step in steps else (steps[-1] if steps else None),
        "can_submit": _submittable_teams(user).exists(),
    }
    return render(request, "runs/trajectories.html", context)


@login_required
def run_compare(request: HttpRequest) -> HttpResponse:
    """The compare page for the runs named by `?runs=<id>` (repeated, or comma-separated). A run the user cannot
    see is a 404, as on every run page; the data comes from the compare API."""
    user = acting_user(request)
    ids = list(dict.fromkeys(part for value in request.GET.getlist("runs") for part in value.split(",") if part))
    if len(ids) > selectors.MAX_COMPARED_RUNS:
        raise Http404(f"compare at most {selectors.MAX_COMPARED_RUNS} runs")
    try:
        runs = [selectors.run_get(user=user, run_id=UUID(run_id)) for run_id in ids]
    except ValueError:
        raise Http404("no such run") from None
    context = {
        "selected": [str(run.pk) for run in runs],
        "max_runs": selectors.MAX_COMPARED_RUNS,
        "can_submit": _submittable_teams(user).exists(),
    }
    return render(request, "runs/compare.html", context)


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


def _run_action(service: Callable[..., Run], done: str) -> Callable[[HttpRequest, str], HttpResponse]:
    """A page action that takes no input: POST it on a run of the user's teams (404 for another team's) and the
    service runs (refusals come back as messages); then back to the run with `done`."""

    @login_required
    @require_POST
    def view(request: HttpRequest, run_id: str) -> HttpResponse:
        user = acting_user(request)
        run = selectors.run_get(user=user, run_id=run_id)
        return _act(request, run, lambda: service(run=run, user=user), done)

    return view


run_cancel = _run_action(services.run_cancel, "Cancellation requested.")
run_resume = _run_action(services.run_resume, "Run queued to resume.")


@login_required
@require_http_methods(["GET", "POST"])
def run_clone(request: HttpRequest, run_id: str) -> HttpResponse:
    """GET: what a clone would queue, with its name, tags and overrides to fill in and a button that queues it (the
    runs list links here, so one click never starts a run). POST: queue it; a refusal shows this page again with
    the input kept and each error beside its field."""
    user = acting_user(request)
    run = selectors.run_get(user=user, run_id=run_id)
    if request.method == "GET" and not _can_act(user, run):
        raise PermissionDenied("Viewers cannot clone runs: ask a team owner for the member role.")
    form = CloneForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            clone = services.run_clone(
                run=run, user=user, name=data["name"] or None, tags=data["tag_list"], overrides=data["overrides"]
            )
        except InvalidInput as error:
            form.apply_config_errors(error)
        except ServiceError as error:
            form.add_error(None, error.message)
        else:
            messages.success(request, "Clone queued.")
            return redirect("runs:detail", run_id=clone.pk)
    context = {"run": run, "form": form, "tags": selectors.run_tag_names(run=run)}
    return render(request, "runs/clone.html", context, status=400 if request.method == "POST" else 200)


@login_required
@require_POST
def run_control(request: HttpRequest, run_id: str) -> HttpResponse:
    """The run page's steering: inject an instruction, or pin, unpin or retire one (the same service as the API)."""
    user = acting_user(request)
    run = selectors.run_get(user=user, run_id=run_id)
    form = ControlForm(request.POST)
    if not form.is_valid():
        messages.error(request, _errors_text(form))
        return redirect("runs:detail", run_id=run.pk)
    data = form.cleaned_data

    def send() -> Any:
        return services.control_request_create(
            run=run,
            user=user,
            kind=data["kind"],
            text=data["text"] or None,
            verify=not data["skip_verification"],
            instruction_id=data["instruction_id"] or None,
        )

    return _act(request, run, send, "Request sent: the run takes it before its next step.")


@login_required
@require_POST
def run_evaluate(request: HttpRequest, run_id: str) -> HttpResponse:
    """Queue an evaluation (the same service as the API). A refusal shows the run's page again with the form open,
    its errors beside the fields they name and the input kept."""
    user = acting_user(request)
    run = selectors.run_get(user=user, run_id=run_id)
    form = EvaluateForm(request.POST)
    if not form.is_valid():
        return _detail_page(request, run, evaluate_form=form)
    data = form.cleaned_data
    checkpoint = None
    if data.get("checkpoint"):
        checkpoint = selectors.checkpoint_get(run=run, checkpoint_id=data["checkpoint"])
    try:
        services.run_evaluate(
            run=run,
            user=user,
            benchmarks=data["benchmarks"],
            checkpoint=checkpoint,
            limit=data.get("limit"),
        )
    except InvalidInput as error:
        form.apply_errors(error)
        return _detail_page(request, run, evaluate_form=form)
    except ServiceError as error:
        form.add_error(None, error.message)
        return _detail_page(request, run, evaluate_form=form)
    messages.success(request, "Evaluation queued.")
    return redirect("runs:detail", run_id=run.pk)


@login_required
@require_POST
def run_heatmap(request: HttpRequest, run_id: str) -> HttpResponse:
    """The run page's heatmap form: queue the heatmap (the same service as the API); the page draws it as it fills."""
    user = acting_user(request)
    run = selectors.run_get(user=user, run_id=run_id)
    form = HeatmapForm(request.POST, **_heatmap_choices(run))
    if not form.is_valid():
        messages.error(request, _errors_text(form))
        return redirect("runs:detail", run_id=run.pk)
    data = form.cleaned_data

    def request_heatmap() -> Any:
        return heatmaps.heatmap_request(
            run=run,
            user=user,
            instructions=data["instructions"],
            steps=data["steps"],
            benchmark=data["benchmark"],
            sample_size=data["sample_size"],
            sample_seed=data["sample_seed"],
        )

    return _act(request, run, request_heatmap, "Heatmap queued: its cells fill in as they are scored.")
