"""The Data page's upload, see, confirm without the page's script: the form posts to `preview`, which checks and
stages the file and shows its first rows on the staged upload's page, whose buttons keep or discard it. With the
script, the same steps go through the API (`staging_apis`) on the Data page itself."""

from __future__ import annotations

from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from webapp.accounts.models import Role
from webapp.accounts.permissions import acting_user
from webapp.accounts.selectors import team_list
from webapp.core.errors import InvalidInput, ServiceError

from . import services, staging
from .forms import UploadForm
from .uploads import upload_too_large


@login_required
def upload_preview(request: HttpRequest) -> HttpResponse:
    user = acting_user(request)
    teams = team_list(user=user, min_role=Role.MEMBER)
    form = UploadForm(request.POST or None, request.FILES or None, teams=teams, initial={"team": teams.first()})
    if request.method == "POST":
        if upload_too_large(request):
            form.add_error("file", services.too_large_message())
        elif form.is_valid():
            data = form.cleaned_data
            try:
                staged = staging.upload_stage(
                    team=data["team"], user=user, name=data["name"], kind=data["kind"], split=data["split"],
                    upload=data["file"], filename=data["file"].name, mapping=form.mapping(),
                )  # fmt: skip
            except InvalidInput as error:
                for field, errors in error.errors.items():
                    form.add_error(field if field in form.fields else None, errors)
            except ServiceError as error:
                form.add_error("file", error.message)
            else:
                return redirect("data:staged", staged_id=staged.pk)
    status = 400 if request.method == "POST" else 200
    return render(request, "data/upload.html", {"form": form, "can_upload": teams.exists()}, status=status)


@login_required
def staged_page(request: HttpRequest, staged_id: UUID) -> HttpResponse:
    user = acting_user(request)
    staged = staging.staged_get(user=user, staged_id=staged_id)
    if request.method == "POST":
        try:
            if request.POST.get("action") == "discard":
                staging.staged_discard(staged=staged, user=user)
                messages.success(request, f"{staged.source_name} discarded; nothing was kept.")
                return redirect("data:list")
            uploaded = staging.staged_confirm(staged=staged, user=user)
        except ServiceError as error:
            messages.error(request, error.message)
            return redirect("data:staged", staged_id=staged.pk)
        version = uploaded.version
        again = "" if uploaded.created else " (the same content was already there)"
        messages.success(
            request, f"data:{version.dataset.name} version {version.number}: {version.records} records{again}."
        )
        return redirect("data:detail", dataset_id=version.dataset_id)
    context = {"staged": staged, "existing": staging.staged_existing(staged)}
    return render(request, "data/staged.html", context)
