"""Sizes on the pages are in binary units and say so (KiB, MiB, GiB): Django's `filesizeformat` prints "MB" for
2^20 bytes, so no template uses it; `binary_size` (webapp/core/templatetags/sizes.py) prints them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.template import Context, Template

from tests.webapp.data.conftest import jsonl, questions, upload
from webapp.core.templatetags.sizes import binary_size
from webapp.data.models import DatasetVersion

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 bytes"), (1, "1 byte"), (1023, "1023 bytes"), (1024, "1.0 KiB"), (2**20, "1.0 MiB"),
     (16_446_976, "15.7 MiB"), (5 * 2**30, "5.0 GiB"), (2**50, "1024.0 TiB"), ("x", "0 bytes")],
)  # fmt: skip
def test_binary_size_names_the_binary_unit_of_its_number(size, text):
    assert binary_size(size) == text.replace(" ", "\u00a0")
    assert Template("{% load sizes %}{{ n|binary_size }}").render(Context({"n": size})) == binary_size(size)


def test_no_page_prints_a_size_with_filesizeformat():
    templates = [p for p in (ROOT / "webapp").rglob("*.html") if "filesizeformat" in p.read_text()]
    assert templates == []


@pytest.mark.django_db
def test_the_data_pages_print_a_datasets_size_in_binary_units(alice, api, client):
    dataset = upload(api(alice), jsonl(questions(8)), split="test").json()["dataset"]
    DatasetVersion.objects.filter(dataset_id=dataset["id"]).update(size_bytes=3 * 2**20)
    client.force_login(alice)
    for url in ("/data/", f"/data/{dataset['id']}/"):
        page = client.get(url).content.decode()
        assert "3.0\u00a0MiB" in page and not re.search(r"\dMB\b|\d\u00a0MB\b", page), url
