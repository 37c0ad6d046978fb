"""Data tests: the data storage and the worker cache in the test's own directory, and small files in every format
an upload takes."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def data_storage(settings: Any, tmp_path: Path) -> Path:
    store = tmp_path / "store"
    settings.STORAGES = {
        **settings.STORAGES,
        "data": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": str(store)}},
    }
    settings.INSPO_CACHE_DIR = tmp_path / "cache"
    settings.INSPO_DATA_DIR = tmp_path / "data"
    settings.INSPO_SHARED_DATA_DIR = tmp_path / "data" / "shared"
    return store


def questions(n: int = 8, *, prefix: str = "q", start: int = 0) -> list[dict[str, Any]]:
    return [
        {"id": f"{prefix}{i}", "question": f"What is the capital of country {i}?", "golden_answers": [f"City {i}"]}
        for i in range(start, start + n)
    ]


def corpus(n: int = 12) -> list[dict[str, Any]]:
    return [{"id": f"p{i}", "contents": f'"Country {i}"\nThe capital of country {i} is City {i}.'} for i in range(n)]


def jsonl(records: list[Any]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def gz(data: bytes) -> bytes:
    return gzip.compress(data)


def parquet(columns: dict[str, list[Any]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(pa.table(columns), buffer)
    return buffer.getvalue()


def upload(client: Any, content: bytes, filename: str = "questions.jsonl", **fields: Any) -> Any:
    from django.core.files.uploadedfile import SimpleUploadedFile

    data = {"name": "mine", "kind": "questions", **fields, "file": SimpleUploadedFile(filename, content)}
    return client.post("/api/v1/datasets/", data, format="multipart")
