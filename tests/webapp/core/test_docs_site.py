"""The documentation site at /docs/: its pages, a folder's index.html, their content types and the page's own inline
scripts allowed by hash in the app's CSP; nothing outside the built folder (no `..`, encoded or not, no link out);
a helpful 404 when the site is not built; and the links to it from the navigation and from the pages' "see … in the
documentation"."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import pytest
from django.urls import reverse

from webapp.core.docs import docs_file

WEBAPP = Path(__file__).resolve().parents[3] / "webapp"
DOCS = WEBAPP.parent / "docs"
INLINE = "var palette = 1;"


@pytest.fixture
def site(settings, tmp_path: Path) -> Path:
    """A small built site in tmp_path/site, with a secret beside it that no URL may reach."""
    root = tmp_path / "site"
    (root / "experiments").mkdir(parents=True)
    (root / "assets").mkdir()
    (root / "index.html").write_text(f"<html><script>{INLINE}</script><p>INSPO home</p></html>", encoding="utf-8")
    (root / "data.html").write_text("<html><p>Bring your data</p></html>", encoding="utf-8")
    (root / "experiments" / "index.html").write_text("<p>experiments index</p>", encoding="utf-8")
    (root / "assets" / "site.css").write_text("body {}", encoding="utf-8")
    (root / "assets" / "bundle.js").write_text("let a = 1;", encoding="utf-8")
    (root / "search_index.json").write_text("{}", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("SECRET", encoding="utf-8")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "index.html").write_text("SECRET", encoding="utf-8")
    settings.INSPO_DOCS_DIR = root
    return root


def test_the_index_is_served_to_anyone_with_the_apps_headers(client, site):
    response = client.get("/docs/")

    assert response.status_code == 200
    assert response["Content-Type"] == "text/html; charset=utf-8"
    assert b"INSPO home" in response.content
    policy = response["Content-Security-Policy"]
    digest = base64.b64encode(hashlib.sha256(INLINE.encode()).digest()).decode()
    assert re.search(rf"script-src 'self' 'sha256-{re.escape(digest)}'", policy)
    assert "frame-ancestors 'none'" in policy and "unsafe-eval" not in policy
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"


def test_a_page_and_a_folders_index(client, site):
    assert b"Bring your data" in client.get("/docs/data.html").content
    assert b"experiments index" in client.get("/docs/experiments/").content
    redirect = client.get("/docs/experiments")
    assert redirect.status_code == 302 and redirect["Location"] == "/docs/experiments/"


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("assets/site.css", "text/css; charset=utf-8"),
        ("assets/bundle.js", "text/javascript; charset=utf-8"),
        ("search_index.json", "application/json; charset=utf-8"),
    ],
)
def test_content_types(client, site, path, content_type):
    response = client.get(f"/docs/{path}")

    assert response.status_code == 200
    assert response["Content-Type"] == content_type


@pytest.mark.parametrize(
    "path",
    [
        "/docs/../secret.txt",
        "/docs/%2e%2e/secret.txt",
        "/docs/..%2fsecret.txt",
        "/docs/%2e%2e%2fsecret.txt",
        "/docs/experiments/../../secret.txt",
        "/docs/..%5csecret.txt",
        "/docs/../settings.py",
        "/docs//etc/passwd",
        "/docs/%00index.html",
        "/docs/link-out/index.html",
        "/docs/link-out/",
        "/docs/secret-link.txt",
        "/docs/missing.html",
    ],
)
def test_nothing_outside_the_site_is_served(client, site, path):
    (site / "link-out").symlink_to(site.parent / "outside")
    (site / "secret-link.txt").symlink_to(site.parent / "secret.txt")

    response = client.get(path)

    assert response.status_code == 404
    assert b"SECRET" not in response.content


@pytest.mark.parametrize("path", ["..", "../secret.txt", "experiments/../data.html", "./data.html", "..\\secret.txt"])
def test_the_resolver_refuses_dot_segments_before_looking(site, path):
    assert docs_file(site, path) is None


def test_the_resolver_finds_files_and_folders_inside(site):
    assert docs_file(site, "data.html") == (site / "data.html").resolve()
    assert docs_file(site, "experiments/") == (site / "experiments").resolve()
    assert docs_file(site, "") == site.resolve()


def test_a_link_inside_the_site_is_followed(client, site):
    (site / "home.html").symlink_to(site / "index.html")

    assert b"INSPO home" in client.get("/docs/home.html").content


def test_an_unbuilt_site_answers_404_saying_how_to_build_it(client, settings, tmp_path):
    settings.INSPO_DOCS_DIR = tmp_path / "never-built"

    response = client.get("/docs/data.html")

    assert response.status_code == 404
    assert b'data-testid="docs-missing"' in response.content
    assert b"make docs" in response.content


def test_the_navigation_links_to_the_documentation(client, alice, site):
    signed_out = client.get(reverse("accounts:login"))
    client.force_login(alice)
    signed_in = client.get(reverse("runs:list"))

    for response in (signed_out, signed_in):
        assert response.status_code == 200
        assert re.search(rb'<a href="/docs/" data-testid="nav-docs">Documentation</a>', response.content)


def test_the_data_page_links_to_its_documentation_page(client, alice, site):
    client.force_login(alice)

    assert b'href="/docs/data.html"' in client.get(reverse("data:list")).content


def test_every_documentation_link_of_the_pages_names_a_page_of_the_site():
    """`{% url 'docs' 'x.html' %}#anchor` in a template, `"/docs/x.html#anchor"` in the dashboards' source: docs/x.md
    exists (mkdocs builds it as x.html with use_directory_urls off) and has the heading; and no template says "in
    the documentation" without a link."""
    templates = sorted(WEBAPP.rglob("templates/**/*.html"))
    links = [
        (template, match.group(1), match.group(2))
        for template in templates
        for match in re.finditer(r"\{% url 'docs' '([^']*)' %\}(?:#([\w-]+))?", template.read_text(encoding="utf-8"))
    ]
    links += [
        (source, match.group(1), match.group(2))
        for source in sorted((WEBAPP.parent / "frontend" / "src").rglob("*.ts"))
        for match in re.finditer(r"[\"'`]/docs/([\w/.-]*)(?:#([\w-]+))?[\"'`]", source.read_text(encoding="utf-8"))
    ]
    unlinked = [
        template.name
        for template in templates
        for line in template.read_text(encoding="utf-8").splitlines()
        if re.search(r"(in|of) the documentation", line) and "{% url 'docs'" not in line
    ]

    assert len(links) >= 5
    assert not unlinked
    for template, page, anchor in links:
        markdown = DOCS / (page.removesuffix(".html") + ".md" if page else "index.md")
        assert markdown.is_file(), f"{template.name} links to {page}, which no docs/*.md builds"
        if anchor:
            headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", markdown.read_text(encoding="utf-8"), re.MULTILINE)
            slugs = {re.sub(r"\s+", "-", re.sub(r"[^\w\s-]", "", heading.lower()).strip()) for heading in headings}
            assert anchor in slugs, f"{template.name} links to {page}#{anchor}, not a heading there"
