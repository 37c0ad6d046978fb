"""Computes a reachability check as a job: claims it, fetches the questions split and the corpus into the cache,
searches the corpus's index for every question (through the retrieval service where the deployment has one, else
in this process; an index that no job built is built here, as a run would) and scans the corpus once for the
answers, reporting progress; it stops at the next report once cancelled."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from django.conf import settings

from inspo_engine.build import SERVICE_RETRIES
from inspo_engine.env.datasets import load_flashrag_questions
from inspo_engine.env.indexes import CorpusIndex, build_index, count_lines, index_name
from inspo_engine.env.reach import reachability
from inspo_engine.env.retrievers import RemoteRetriever, embed_texts
from inspo_engine.env.store import corpus_digest
from webapp.data.models import ReachCheck
from webapp.data.reach import reach_check_claim, reach_check_end, reach_check_progress
from webapp.data.references import version_file

log = logging.getLogger(__name__)


class ReachCancelled(Exception):
    """The check was cancelled while it ran."""


def reach_execute(*, check_id: int) -> str:
    """Compute the check once ('skipped' when a cancel or another worker got to it first)."""
    check = reach_check_claim(check_id=check_id)
    if check is None:
        return "skipped"
    try:
        result = _compute(check)
    except ReachCancelled:
        log.info("reachability check %s cancelled", check_id)
        return "cancelled"
    except Exception as error:
        log.exception("reachability check %s failed", check_id)
        reach_check_end(check_id=check_id, error=f"{type(error).__name__}: {error}")
        return "failed"
    reach_check_end(check_id=check_id, result=result)
    return "done"


def _compute(check: ReachCheck) -> dict[str, Any]:
    cache = Path(settings.INSPO_CACHE_DIR)

    def progress(stage: str, done: int, total: int) -> None:
        if not reach_check_progress(check_id=check.pk, stage=stage, done=done, total=total):
            raise ReachCancelled

    questions = load_flashrag_questions(version_file(check.questions, cache))
    corpus = version_file(check.corpus, cache)
    retriever = _retriever(check.method, corpus, cache, progress)
    result = reachability(questions, corpus, retriever, check.k, corpus_lines=count_lines(corpus), progress=progress)
    return {
        "question_count": result.questions,
        "reachable_topk": result.topk,
        "reachable_anywhere": result.anywhere,
        "examples": {
            "nowhere": _texts(questions, result.nowhere_examples),
            "beyond_topk": _texts(questions, result.missed_examples),
        },
    }


def _retriever(method: str, corpus: Path, cache: Path, progress: Any) -> Any:
    """The corpus's index as runs search it: the retrieval service's when there is one, else opened here."""
    encode = embed_texts if method == "dense" else None
    root = cache / "indexes"
    milvus_bm25 = settings.INSPO_RETRIEVAL_ENGINE == "milvus" and method == "bm25"  # Milvus holds it, not a folder
    if settings.INSPO_RETRIEVAL_URL:
        name = index_name(method, corpus_digest(corpus))
        if not milvus_bm25 and not (root / name / "meta.json").is_file():
            build_index(method, corpus, root, encode=encode, progress=lambda d, t: progress("index", d, t))
        return RemoteRetriever(f"{settings.INSPO_RETRIEVAL_URL}/indexes/{name}/retrieve", retries=SERVICE_RETRIES)
    folder = build_index(method, corpus, root, encode=encode, progress=lambda d, t: progress("index", d, t))
    return CorpusIndex(folder, encode=encode)


def _texts(questions: list[Any], ids: list[str]) -> list[dict[str, Any]]:
    by_id = {q.id: q for q in questions}
    return [{"id": i, "question": by_id[i].text, "answers": list(by_id[i].golden_answers)[:5]} for i in ids]
