"""The Content-Security-Policy holds in a real browser: signing in, Swagger UI (the sidecar's files and its start
script) and the dashboards' charts with their tooltips work with no violation and no console error. The whole
dashboards flow runs under the same policy in test_dashboards_e2e.py, which fails on any console error."""

from __future__ import annotations

import pytest

from tests.browser import test_dashboards_e2e as e2e
from tests.factories import RunFactory, StepMetricFactory

browser = e2e.browser  # the chromium fixture


@pytest.mark.django_db(transaction=True)
def test_sign_in_and_the_api_docs_work_under_the_policy(browser, live_server, alice):
    pages = e2e.Pages(browser, live_server.url)
    page = pages.page
    page.add_init_script(
        "document.addEventListener('securitypolicyviolation',"
        " e => console.error('CSP violation: ' + e.violatedDirective + ' ' + e.blockedURI));"
    )
    response = pages.goto("/accounts/login/?next=/accounts/tokens/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", e2e.PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/accounts/tokens/")
    pages.assert_no_errors("sign-in")

    pages.goto("/api/docs/")
    page.locator(".opblock").first.wait_for()
    assert page.locator(".opblock").count() > 10
    page.locator(".opblock-summary").first.click()
    page.locator(".opblock-body").first.wait_for()
    pages.assert_no_errors("sign-in and API docs")
    for step in (1, 2, 3):
        StepMetricFactory(run=RunFactory(team=alice.memberships.get().team, name=f"run {step}"), step=step)
    runs = "&".join(f"runs={pk}" for pk in RunFactory._meta.model.objects.values_list("pk", flat=True))
    pages.goto(f"/compare/?{runs}")
    chart = page.locator('[data-testid="chart-compare-reward_mean"] canvas').first
    chart.wait_for()
    box = chart.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)  # the tooltip sets inline styles
    page.wait_for_timeout(300)
    pages.assert_no_errors("the compare page's charts")
