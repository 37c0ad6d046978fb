"""The reachability part of the Data page (a questions dataset's checks against corpora, and the form that starts
one) and of the run page (the check of a run's training data); they call the same services as the API."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest

from webapp.accounts.models import Role, Team, User
from webapp.accounts.permissions import role_of
from webapp.accounts.selectors import team_list
from webapp.core.errors import ServiceError

from . import reach
from .indexing import METHODS
from .models import Dataset, ReachCheck
from .references import data_choices


def percent(share: float | None) -> str:
    """A share as the pages show it.

    >>> percent(0.625), percent(1 / 3), percent(None)
    ('62.5 %', '33.3 %', '–')
    """
    return "–" if share is None else f"{100 * share:.1f} %"


def reach_row(check: ReachCheck) -> dict[str, Any]:
    """A check as a row of the pages: shares in words, how far it is, whether it is low."""
    share = check.topk_share
    return {
        "check": check,
        "questions": f"data:{check.questions.dataset.name}@{check.questions.number}",
        "corpus": f"data:{'shared/' if check.corpus.dataset.shared else ''}{check.corpus.dataset.name}"
        f"@{check.corpus.number}",
        "topk": percent(share),
        "anywhere": percent(check.anywhere_share),
        "low": share is not None and share < reach.LOW_SHARE,
    }


def _checking_team(user: User, dataset: Dataset) -> Team | None:
    """Whose references the Data page's check names: the dataset's team; for shared data, the user's first team
    in which they are a member."""
    if dataset.team is not None:
        role = role_of(user, dataset.team)
        return dataset.team if role is not None and role.rank >= Role.MEMBER.rank else None
    return team_list(user=user, min_role=Role.MEMBER).first()


def reach_context(*, user: User, dataset: Dataset, splits: list[str]) -> dict[str, Any]:
    """The Data page's reachability section of a questions dataset (nothing for a corpus)."""
    if dataset.kind != Dataset.Kind.QUESTIONS:
        return {}
    team = _checking_team(user, dataset)
    checks = reach.reach_checks_of(user=user, dataset_id=dataset.pk)
    return {
        "reach_rows": [reach_row(c) for c in checks],
        "reach_corpora": data_choices([team], "corpus") if team is not None else [],
        "reach_splits": splits,
        "reach_methods": METHODS,
        "can_check": team is not None,
        "low_share": percent(reach.LOW_SHARE),
    }


def reach_act(request: HttpRequest, *, user: User, dataset: Dataset) -> None:
    """The Data page's Check button: start (or find) the check the form names; a message says what became of it."""
    team = _checking_team(user, dataset)
    if team is None:
        messages.error(request, "Checking needs the member role in a team.")
        return
    reference = f"data:{'shared/' if dataset.shared else ''}{dataset.name}"
    k_text = request.POST.get("k", "3")
    try:
        target = reach.reach_target(
            team=team, questions=reference, split=request.POST.get("split", "train"),
            corpus=request.POST.get("corpus", ""), method=request.POST.get("method", "bm25"),
            k=int(k_text) if k_text.isdigit() else 0,
        )  # fmt: skip
        check, _ = reach.reach_check_start(target=target, user=user)
    except ServiceError as error:
        messages.error(request, error.message)
        return
    what = f"{target.corpus_reference}, {target.method}, k={target.k}"
    messages.success(request, f"Reachability of {target.questions_reference} against {what}: {check.status}.")
