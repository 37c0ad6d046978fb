"""What a newcomer sees on the way through the site, in a real browser: no page shows template source, the API docs
send someone signed out to sign in and back, and a run that does not exist is the site's own 404 page."""

from __future__ import annotations

import uuid

import pytest

from inspo_engine.presets import preset
from tests.browser import test_dashboards_e2e as e2e
from tests.browser.test_first_use import signed_in
from tests.factories import InstructionFactory, PopulationMemberFactory, PopulationSnapshotFactory, RunFactory
from webapp.runs.models import Run

browser = e2e.browser  # the chromium fixture


@pytest.mark.django_db(transaction=True)
def test_no_page_shows_a_template_comment(browser, live_server, alice, alice_team):
    run = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED, preset="smoke")
    other = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED, preset="smoke")
    pages = signed_in(browser, live_server, alice)
    paths = ["/", "/runs/new/", f"/runs/{run.pk}/", f"/runs/{run.pk}/clone/", f"/runs/{run.pk}/lineage/"]
    paths += [f"/runs/{run.pk}/trajectories/", f"/compare/?runs={run.pk}&runs={other.pk}", "/experiments/"]
    paths += ["/accounts/tokens/", f"/accounts/teams/{alice_team.slug}/"]
    for path in paths:
        response = pages.goto(path)
        assert response.status == 200, path
        if path == f"/runs/{run.pk}/":
            pages.page.get_by_test_id("heatmaps").wait_for()  # the section whose comment showed
        text = pages.page.content()
        assert "{#" not in text and "#}" not in text, f"{path} shows template source"


@pytest.mark.django_db(transaction=True)
def test_the_api_docs_send_someone_signed_out_to_sign_in_and_back(browser, live_server, alice):
    pages = e2e.Pages(browser, live_server.url)
    page = pages.page
    pages.goto("/api/docs/")
    page.wait_for_url("**/accounts/login/?next=/api/docs/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", e2e.PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/api/docs/")
    page.locator(".opblock").first.wait_for()
    pages.assert_no_errors("the API docs after signing in")


@pytest.mark.django_db(transaction=True)
def test_a_missing_run_is_the_sites_404_page_with_its_navigation(browser, live_server, alice, bob, alice_team):
    hidden = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED)
    pages = signed_in(browser, live_server, bob)
    page = pages.page
    for path in (f"/runs/{uuid.uuid4()}/", f"/runs/{hidden.pk}/"):  # none at all, and alice's
        response = pages.goto(path)
        assert response.status == 404
        assert page.get_by_test_id("not-found").is_visible()
        assert page.get_by_role("navigation", name="Site").get_by_role("link", name="Runs").is_visible()
        assert page.get_by_role("link", name="Back to your runs").is_visible()


@pytest.mark.django_db(transaction=True)
def test_the_inject_form_says_what_happens_when_the_population_is_full(browser, live_server, alice, alice_team):
    config = preset("smoke").to_dict()
    run = RunFactory(team=alice_team, creator=alice, status=Run.Status.RUNNING, preset="smoke", config=config)
    pages = signed_in(browser, live_server, alice)
    pages.goto(f"/runs/{run.pk}/")
    says = pages.page.get_by_test_id("inject-room").inner_text()
    size = config["population"]["population_size"]
    assert f"holds at most {size} instructions" in says
    assert "lowest-weight member that is not pinned" in says
    assert "every member is pinned, the request is refused" in says


def field_box(page, name):
    """The grid cell that holds a form field, its help and its errors."""
    return page.locator(f"[name={name}]").locator("xpath=..")


@pytest.mark.django_db(transaction=True)
def test_an_error_in_the_overrides_is_shown_under_overrides(browser, live_server, alice):
    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto("/runs/new/")
    page.wait_for_selector("#app[data-ready=true]")
    page.fill("input[name=name]", "bad overrides")
    page.fill("textarea[name=overrides]", '{"grpo.total_steps": 0}')
    page.get_by_role("button", name="Submit").click()
    page.wait_for_load_state()
    assert "grpo.total_steps" in field_box(page, "overrides").locator(".errorlist").inner_text()
    assert field_box(page, "total_steps").locator(".errorlist").count() == 0


@pytest.mark.django_db(transaction=True)
def test_the_clone_forms_overrides_box_has_an_example(browser, live_server, alice, alice_team):
    run = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED, preset="smoke")
    pages = signed_in(browser, live_server, alice)
    pages.goto(f"/runs/{run.pk}/clone/")
    overrides = pages.page.locator("textarea[name=overrides]")
    assert overrides.get_attribute("placeholder") == '{"grpo.total_steps": 20}'
    assert '{"grpo.total_steps": 20, "seed": 1}' in field_box(pages.page, "overrides").inner_text()


@pytest.mark.django_db(transaction=True)
def test_the_optimizer_fields_follow_a_preset_that_uses_the_rules_optimizer(browser, live_server, alice):
    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto("/runs/new/")
    page.wait_for_selector("#app[data-ready=true]")
    page.select_option("select[name=preset]", "cpu-demo")
    provider = page.locator('select[name=optimizer_provider] option[value=""]')
    assert provider.inner_text() == "(preset: rules)"
    assert page.locator('select[name=optimizer_provider] option[value="rules"]').count() == 1
    assert page.get_attribute("input[name=optimizer_model]", "placeholder") in ("", None)
    assert "gemini" not in page.locator("input[name=optimizer_model]").evaluate("e => e.parentElement.innerText")
    pages.assert_no_errors("the new run form with the cpu-demo preset")


@pytest.mark.django_db(transaction=True)
def test_the_steering_table_follows_the_population_as_it_refreshes(browser, live_server, alice, alice_team):
    run = RunFactory(team=alice_team, creator=alice, status=Run.Status.RUNNING, step=1, total_steps=4)
    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("#app[data-ready=true]")
    steering = page.get_by_test_id("steer-instructions")
    assert "No instructions stored yet" in steering.inner_text()

    members = [InstructionFactory(run=run, key=f"ins-000{i}") for i in range(3)]
    snapshot = PopulationSnapshotFactory(run=run, step=2, reason="step", best=members[0])
    for instruction in members:
        PopulationMemberFactory(snapshot=snapshot, instruction=instruction)
    Run.objects.filter(pk=run.pk).update(step=2)

    page.locator('[data-testid="steer-instructions"] tr[data-instruction="ins-0002"]').wait_for(timeout=20_000)
    rows = page.locator('[data-testid="steer-instructions"] tr[data-instruction]')
    assert [rows.nth(i).get_attribute("data-instruction") for i in range(3)] == ["ins-0000", "ins-0001", "ins-0002"]
    assert page.get_by_test_id("retire-ins-0001").is_visible()  # its forms came with it
    pages.assert_no_errors("the run page as its population fills in")


@pytest.mark.django_db(transaction=True)
def test_the_steering_table_shows_each_instruction_by_what_sets_it_apart(browser, live_server, alice, alice_team):
    run = RunFactory(team=alice_team, creator=alice, status=Run.Status.RUNNING)
    opening = run.config["population"]["seed_instruction"]
    last = opening.split()[-1]
    seed = InstructionFactory(run=run, key="ins-0000", text=opening)
    InstructionFactory(run=run, key="ins-0001", origin="reflection", parent=seed, text=f"{opening} Check the dates.")
    InstructionFactory(run=run, key="ins-0002", origin="reflection", parent=seed, text=f"{opening} Name the city.")
    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto(f"/runs/{run.pk}/")
    assert page.get_by_test_id("differs-ins-0001").inner_text() == f"… {last} Check the dates."
    assert page.get_by_test_id("differs-ins-0002").inner_text() == f"… {last} Name the city."
    seed_words = page.get_by_test_id("differs-ins-0000").inner_text()  # the seed itself: its opening words
    assert seed_words.split()[:12] == opening.split()[:12]
    row = page.locator('[data-testid="steer-instructions"] tr[data-instruction="ins-0001"]').inner_text()
    assert "reflection" in row and "what differs from its parent" in row


@pytest.mark.django_db(transaction=True)
def test_the_lineage_list_shows_each_instruction_by_what_sets_it_apart(browser, live_server, alice, alice_team):
    run = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED, step=2, total_steps=2)
    opening = run.config["population"]["seed_instruction"]
    seed = InstructionFactory(run=run, key="ins-0000", text=opening)
    InstructionFactory(run=run, key="ins-0001", origin="reflection", parent=seed, text=f"{opening} Check the dates.")
    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto(f"/runs/{run.pk}/lineage/")
    page.wait_for_selector("#app[data-ready=true]")
    child = page.get_by_test_id("lineage-differs-ins-0001").inner_text()
    assert child == f" · … {opening.split()[-1]} Check the dates."
    assert page.get_by_test_id("lineage-differs-ins-0000").inner_text().split()[1:4] == opening.split()[:3]
    pages.assert_no_errors("the lineage page")
