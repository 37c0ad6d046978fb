"""The retrieval service as the web app sees it: its address and engine from the settings, and what it reports,
narrowed to the indexes of corpora a team can see."""

from __future__ import annotations

from typing import Any

import httpx
from django.conf import settings

from inspo_engine.env.indexes import index_name
from inspo_engine.env.milvus import MilvusSettings
from webapp.accounts.selectors import team_list
from webapp.core.errors import Unavailable

from .models import Dataset, DatasetVersion


def milvus_settings() -> MilvusSettings:
    return MilvusSettings(uri=settings.INSPO_MILVUS_URI, token=settings.INSPO_MILVUS_TOKEN)


def retrieval_status(*, user: Any) -> dict[str, Any]:
    """The service's memory and, for each index of a corpus these teams (or every team, for shared data) can see,
    its size and latency; the index is named by the corpus's data reference, never by another team's name."""
    if not settings.INSPO_RETRIEVAL_URL:
        return {"service": None, "engine": settings.INSPO_RETRIEVAL_ENGINE, "indexes": []}
    try:
        response = httpx.get(f"{settings.INSPO_RETRIEVAL_URL}/indexes", timeout=5.0)
        response.raise_for_status()
        report = response.json()
    except (httpx.HTTPError, ValueError) as error:
        raise Unavailable("the retrieval service does not answer; its log says why") from error
    teams = team_list(user=user)
    visible: dict[str, str] = {}
    versions = DatasetVersion.objects.filter(dataset__kind=Dataset.Kind.CORPUS).select_related("dataset")
    for version in versions.filter(dataset__team__in=teams) | versions.filter(dataset__team__isnull=True):
        prefix = "shared/" if version.dataset.team_id is None else ""
        for method in ("bm25", "dense"):
            visible.setdefault(
                index_name(method, version.sha256), f"data:{prefix}{version.dataset.name}@{version.number}"
            )
    indexes = [
        entry | {"corpus": visible[entry["name"]]}
        for entry in report.get("indexes", [])
        if entry.get("name") in visible
    ]
    return {"service": "up", "engine": report.get("engine"), "rss_bytes": report.get("rss_bytes"), "indexes": indexes}
