"""The Data page: the team's and the shared datasets with their splits and sizes, the upload form (a progress bar
when the browser runs the page's script, a plain form post without it), and one dataset with its preview, length
histogram, versions, the runs that used it, its index jobs, and delete. Pages call the same services as the API."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from webapp.accounts.models import Role
from webapp.accounts.permissions import acting_user, role_of
from webapp.accounts.selectors import team_list
from webapp.core.errors import InvalidInput, ServiceError

from . import selectors, services
from .forms import UploadForm
from .indexing import METHODS, index_job_estimate_s
from .leakage import dataset_leakage
from .models import Dataset
from .reach_views import reach_act, reach_context
from .uploads import upload_too_large


@login_required
def data_list(request: HttpRequest) -> HttpResponse:
    user = acting_user(request)
    teams = team_list(user=user, min_role=Role.MEMBER)
    form = UploadForm(request.POST or None, request.FILES or None, teams=teams, initial={"team": teams.first()})
    status = 200
    if request.method == "POST":
        status = 400
        if upload_too_large(request):
            form.add_error("file", services.too_large_message())
        elif form.is_valid():
            try:
                uploaded = services.dataset_upload(
                    team=form.cleaned_data["team"], user=user, name=form.cleaned_data["name"],
                    kind=form.cleaned_data["kind"], split=form.cleaned_data["split"],
                    upload=form.cleaned_data["file"], filename=form.cleaned_data["file"].name,
                )  # fmt: skip
            except InvalidInput as error:
                for field, errors in error.errors.items():
                    form.add_error(field if field in form.fields else None, errors)
            except ServiceError as error:
                form.add_error("file", error.message)
            else:
                version = uploaded.version
                messages.success(
                    request, f"data:{version.dataset.name} version {version.number}: {version.records} records."
                )
                return redirect("data:detail", dataset_id=version.dataset_id)
    rows = []
    for dataset in selectors.dataset_list(user=user):
        splits = selectors.dataset_splits(dataset=dataset)
        newest = max((v.number for v in dataset.versions.all()), default=0)
        rows.append(
            {"dataset": dataset, "splits": splits, "size": sum(s.size_bytes for s in splits), "version": newest}
        )
    context = {"rows": rows, "form": form, "can_upload": teams.exists(), "can_submit": teams.exists()}
    return render(request, "data/list.html", context, status=status)


@login_required
def data_detail(request: HttpRequest, dataset_id: int) -> HttpResponse:
    user = acting_user(request)
    dataset = selectors.dataset_get(user=user, dataset_id=dataset_id)
    if request.method == "POST":
        return _act(request, dataset)
    role = role_of(user, dataset.team) if dataset.team is not None else None
    splits = selectors.dataset_splits(dataset=dataset)
    split = request.GET.get("split") or (splits[0].split if splits else None)
    context = {
        "dataset": dataset,
        "reference": f"data:{'shared/' if dataset.shared else ''}{dataset.name}",
        "splits": splits,
        "split": split,
        "preview": selectors.dataset_preview(dataset=dataset, split=split),
        "files_missing": selectors.dataset_files_missing(dataset=dataset),
        "histogram": _histogram(splits, split),
        "versions": dataset.versions.order_by("-number"),
        "uses": selectors.dataset_runs(dataset=dataset, user=user)[:100],
        "jobs": [(job, _duration(index_job_estimate_s(job))) for job in selectors.index_job_list(dataset=dataset)],
        "methods": METHODS,
        "can_act": _member(role),
        "can_index": dataset.kind == "corpus"
        and (dataset.shared or (role is not None and role.rank >= Role.MEMBER.rank)),
        "can_submit": team_list(user=user, min_role=Role.MEMBER).exists(),
        "leakage": dataset_leakage(dataset=dataset, others=selectors.dataset_list(user=user, kind="questions")),
        **reach_context(user=user, dataset=dataset, splits=[s.split for s in splits]),
    }
    return render(request, "data/detail.html", context)


def _member(role: Role | None) -> bool:
    return role is not None and role.rank >= Role.MEMBER.rank


def _histogram(splits: list[selectors.SplitSummary], split: str | None) -> list[dict[str, object]]:
    """The split's length bins with each bar's width as a share of the tallest."""
    chosen = next((s for s in splits if s.split == split), None)
    if chosen is None:
        return []
    tallest = max(chosen.lengths.values(), default=0) or 1
    return [{"label": k, "count": v, "width": round(100 * v / tallest)} for k, v in chosen.lengths.items()]


def _act(request: HttpRequest, dataset: Dataset) -> HttpResponse:
    from . import indexing

    user = acting_user(request)
    action = request.POST.get("action")
    try:
        if action == "delete":
            services.dataset_delete(dataset=dataset, user=user)
            messages.success(request, f"data:{dataset.name} deleted.")
            return redirect("data:list")
        if action == "index":
            job, _ = indexing.index_job_start(dataset=dataset, user=user, method=request.POST.get("method", "bm25"))
            messages.success(request, f"Index job {job.pk} ({job.method}): {job.status}.")
        if action == "reach":
            reach_act(request, user=user, dataset=dataset)
    except ServiceError as error:
        messages.error(request, error.message)
    return redirect("data:detail", dataset_id=dataset.pk)


def _duration(seconds: float | None) -> str:
    """A long wait in words.

    >>> _duration(200), _duration(7_500), _duration(1_600_000), _duration(None)
    ('3 min', '2 h 5 min', '18.5 days', '')
    """
    if seconds is None:
        return ""
    if seconds >= 2 * 86_400:
        return f"{seconds / 86_400:.1f} days"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes} min" if hours else f"{max(minutes, 1)} min"
