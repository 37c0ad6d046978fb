"""`manage.py retrieval_service`: the retrieval service over this deployment's indexes (the engine's
`env.service`), configured from the settings; `make run` and docker-compose start it beside the workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from inspo_engine.env.retrievers import DEFAULT_MODEL_NAME, embed_texts
from inspo_engine.env.service import IndexShelf, default_workers, serve
from webapp.data.retrieval import milvus_settings


class Command(BaseCommand):
    help = "Serve Search-R1's POST /retrieve over every built corpus index (one process for every run)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--host", default=settings.INSPO_RETRIEVAL_HOST)
        parser.add_argument("--port", type=int, default=settings.INSPO_RETRIEVAL_PORT)
        parser.add_argument(
            "--workers",
            type=int,
            default=settings.INSPO_RETRIEVAL_WORKERS or default_workers(),
            help="processes sharing the port (INSPO_RETRIEVAL_WORKERS; default one per core, at most 4)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        remote = None
        if settings.INSPO_RETRIEVAL_ENGINE == "milvus":
            from inspo_engine.env.milvus import MilvusRetriever, collection_for_index

            milvus = milvus_settings()

            def remote(name: str) -> MilvusRetriever:
                method = name.split("-", 1)[0]
                model = DEFAULT_MODEL_NAME if method == "dense" else ""
                collection = collection_for_index(milvus.prefix, name, model=model)
                return MilvusRetriever(milvus, collection, method=method, encode=embed_texts)  # type: ignore[arg-type]

        shelf = IndexShelf(Path(settings.INSPO_CACHE_DIR) / "indexes", encoder=lambda: embed_texts, remote=remote)
        if options["workers"] < 1:
            raise CommandError("--workers: at least 1")
        serve(shelf, options["host"], options["port"], workers=options["workers"])
