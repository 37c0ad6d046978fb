"""The reachability part of the Data page (a questions dataset's checks against corpora, and the form that starts
one) and of the run page (the check of a run's training data); they call the same services as the API."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.http import HttpRequest

from webapp.accounts.models import Role, Team, User
from webapp.accounts.permissions import role_of
from webapp.accounts.selectors import team_list
from webapp.core.errors import InvalidInput, ServiceError

from . import reach
from .indexing import METHODS
from .models import Dataset, ReachCheck
from .references import data_choices, is_reference


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
    reference = request.POST.get("questions") or f"data:{'shared/' if dataset.shared else ''}{dataset.name}"
    k_text = request.POST.get("k", "3")
    try:
        target = reach.reach_target(
            team=team, questions=reference, split=request.POST.get("split", "train"),
            corpus=request.POST.get("corpus", ""), method=request.POST.get("method", "bm25"),
            k=int(k_text) if k_text.isdigit() else 0,
        )  # fmt: skip
        if target.questions.dataset_id != dataset.pk:
            raise InvalidInput({"questions": [f"{reference[:80]!r} is not {dataset}"]})
        check, _ = reach.reach_check_start(target=target, user=user)
    except ServiceError as error:
        messages.error(request, error.message)
        return
    what = f"{target.corpus_reference}, {target.method}, k={target.k}"
    messages.success(request, f"Reachability of {target.questions_reference} against {what}: {check.status}.")


def reach_states(teams: Any) -> str:
    """What the New run form's script needs to name a check (`frontend/src/transforms/reach.ts`): each preset's
    training data, corpus, retriever and top-k, the teams' slugs by option value, and the share below which it
    warns; as JSON."""
    from webapp.runs.configs import PRESET_NAMES, config_compose

    presets = {}
    for name in PRESET_NAMES:
        env = config_compose(preset=name).env
        presets[name] = {"dataset": env.dataset, "corpus": env.corpus, "retriever": env.retriever, "top_k": env.top_k}
    slugs = {str(team.pk): team.slug for team in teams}
    return json.dumps({"presets": presets, "teams": slugs, "low": reach.LOW_SHARE})


def run_reach_row(run: Any) -> dict[str, Any] | None:
    """The run page's reachability: the check of its training data against its corpus, retriever and top-k (None
    when it names no uploaded data or a retriever without an index), and what its Check button posts."""
    env = run.config.get("env") or {}
    questions, corpus, method, k = env.get("dataset"), env.get("corpus"), env.get("retriever"), env.get("top_k")
    if not (is_reference(questions) and is_reference(corpus) and method in METHODS and isinstance(k, int)):
        return None
    try:
        target = reach.reach_target(
            team=run.team, questions=questions, split="train", corpus=corpus, method=method, k=k
        )
    except InvalidInput:
        return None
    check = reach.reach_check_find(target)
    return {
        "row": reach_row(check) if check is not None else None,
        "target": target,
        "dataset_id": target.questions.dataset_id,
        "questions": questions,
        "low_share": percent(reach.LOW_SHARE),
    }
