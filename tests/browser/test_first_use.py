"""What a new user meets first, in a real browser: the New run form shows the chosen preset's values and follows
the preset; the runs list's Clone asks before it queues a run; a new API token is shown once, survives no reload
and fits a 390 px screen; a compare table whose runs tie at 0.000 stars nobody, and one whose runs were scored on
different questions says so and compares them on the questions both scored. No console errors anywhere."""

from __future__ import annotations

import pytest

from tests.browser import test_dashboards_e2e as e2e
from tests.factories import EvaluationFactory, RunFactory
from webapp.accounts.models import ApiToken
from webapp.runs.forms import preset_field_texts
from webapp.runs.models import EvaluationAnswer, Run

browser = e2e.browser  # the chromium fixture


def signed_in(browser, live_server, user) -> e2e.Pages:
    pages = e2e.Pages(browser, live_server.url)
    pages.goto("/accounts/login/")
    pages.page.fill("input[name=username]", user.username)
    pages.page.fill("input[name=password]", e2e.PASSWORD)
    pages.page.click("button[type=submit]")
    pages.page.wait_for_url(f"{live_server.url}/")
    return pages


@pytest.mark.django_db(transaction=True)
def test_the_new_run_form_shows_the_chosen_presets_values(browser, live_server, alice):
    presets = preset_field_texts()
    pages = signed_in(browser, live_server, alice)
    page = pages.page
    page.get_by_test_id("submit-run").click()
    page.wait_for_selector("#app[data-ready=true]")
    assert page.get_by_test_id("preset-summary").count() == 0  # the values are listed once, in the fields
    benchmarks = page.locator('.preset-value[data-field="benchmarks"]')
    assert page.input_value("select[name=preset]") == "quick"  # the default: a first run that shows learning
    assert page.get_attribute("input[name=total_steps]", "placeholder") == presets["quick"]["total_steps"] == "12"
    assert benchmarks.inner_text() == f"Preset: {presets['quick']['benchmarks']}."
    name = page.input_value("input[name=name]")
    assert name.startswith("quick-")  # a default name: Submit goes through untouched

    page.select_option("select[name=preset]", "paper")
    assert page.get_attribute("input[name=total_steps]", "placeholder") == presets["paper"]["total_steps"] != "12"
    assert page.get_attribute("input[name=lr]", "placeholder") == presets["paper"]["lr"]
    assert benchmarks.inner_text() == f"Preset: {presets['paper']['benchmarks']}."
    keep_mode = page.locator('select[name=mode] option[value=""]')
    assert keep_mode.inner_text() == f"(preset: {presets['paper']['mode']})"
    assert page.input_value("input[name=name]") == "paper-" + name.removeprefix("quick-")  # follows the preset
    page.fill("input[name=name]", "mine")
    page.select_option("select[name=preset]", "smoke")
    assert page.input_value("input[name=name]") == "mine"  # a name the user wrote stays
    pages.shoot("new-run-form")
    pages.assert_no_errors("the new run form")


@pytest.mark.django_db(transaction=True)
def test_clone_in_the_runs_list_asks_before_it_queues_a_run(browser, live_server, alice, alice_team, enqueued):
    source = RunFactory(team=alice_team, creator=alice, name="worth repeating", status=Run.Status.FINISHED)
    pages = signed_in(browser, live_server, alice)
    page = pages.page
    page.get_by_role("link", name="Clone worth repeating").click()
    page.wait_for_url(f"**/runs/{source.pk}/clone/")
    assert "queues a new run" in page.get_by_test_id("clone-summary").inner_text()
    assert Run.objects.count() == 1 and enqueued == []
    pages.shoot("clone-confirm")

    page.fill("input[name=name]", "repeated")
    page.get_by_test_id("confirm-clone").click()
    page.wait_for_url("**/runs/*/")
    clone = Run.objects.get(cloned_from=source)
    assert page.url.endswith(f"/runs/{clone.pk}/") and clone.name == "repeated"
    assert [args for _, args, _ in enqueued] == [[str(clone.pk)]]
    pages.assert_no_errors("cloning from the list")


@pytest.mark.django_db(transaction=True)
def test_a_new_token_is_shown_once_fits_a_narrow_screen_and_a_reload_makes_no_second(browser, live_server, alice):
    pages = signed_in(browser, live_server, alice)
    page = pages.page
    pages.goto("/accounts/tokens/")
    page.fill("input[name=name]", "laptop")
    page.get_by_role("button", name="Create token").click()
    token = page.locator("#new-token")
    token.wait_for()
    assert page.url == f"{live_server.url}/accounts/tokens/"
    page.set_viewport_size({"width": 390, "height": 844})
    overflow = token.evaluate("element => element.scrollWidth - element.clientWidth")
    assert overflow <= 0, f"the token overflows its box by {overflow} px"
    pages.shoot("token-created")

    page.reload()
    page.get_by_role("heading", name="API tokens").wait_for()
    assert page.locator("#new-token").count() == 0
    assert ApiToken.objects.filter(user=alice).count() == 1
    pages.assert_no_errors("the token page")


@pytest.mark.django_db(transaction=True)
def test_a_tie_at_zero_stars_no_run_in_the_compare_table(browser, live_server, alice, alice_team):
    runs = [RunFactory(team=alice_team, creator=alice, name=name) for name in ("first", "second")]
    for run in runs:
        EvaluationFactory(run=run, benchmark="nq", value=0.0)
    pages = signed_in(browser, live_server, alice)
    pages.goto(f"/compare/?runs={runs[0].pk}&runs={runs[1].pk}")
    table = pages.page.get_by_test_id("benchmark-table")
    table.wait_for()
    body = table.locator("tbody").inner_text()
    assert "0.0" in body and "★" not in body and table.locator(".best-mark").count() == 0
    pages.assert_no_errors("the compare page")


@pytest.mark.django_db(transaction=True)
def test_the_compare_table_shows_each_cells_questions_and_marks_a_column_scored_on_other_questions(
    browser, live_server, alice, alice_team
):
    base, other = (RunFactory(team=alice_team, creator=alice, name=name) for name in ("base", "other"))
    # nq: base on q0-q3, other on q2-q5 (q2 and q3 in common); hotpotqa: both on the same two questions.
    scored(base, "nq", {"q0": 1.0, "q1": 0.0, "q2": 1.0, "q3": 0.0})
    scored(other, "nq", {"q2": 1.0, "q3": 1.0, "q4": 0.0, "q5": 1.0})
    scored(base, "hotpotqa", {"q0": 1.0, "q1": 0.0})
    scored(other, "hotpotqa", {"q0": 1.0, "q1": 1.0})
    pages = signed_in(browser, live_server, alice)
    pages.goto(f"/compare/?runs={base.pk}&runs={other.pk}&baseline={base.pk}")
    table = pages.page.get_by_test_id("benchmark-table")
    table.locator(".delta").first.wait_for()
    assert table.locator('th[data-column="nq"] .questions-mark').inner_text().strip() == "≠"
    assert table.locator('th[data-column="hotpotqa"] .questions-mark').count() == 0
    other_row = table.locator("tbody tr").nth(1)
    nq = other_row.locator('td[data-column="nq"]').inner_text()
    # in EM points, as the verdicts write them: 75.0 over its 4 questions, +50.0 on the 2 shared (not 75.0 − 50.0)
    assert nq.startswith("75.0") and "n=4" in nq and "+50.0" in nq and "on 2 shared" in nq
    hotpotqa = other_row.locator('td[data-column="hotpotqa"]').inner_text()
    assert "n=2" in hotpotqa and "+50.0" in hotpotqa and "shared" not in hotpotqa  # all of its questions
    assert "questions both scored" in table.locator("caption").inner_text()
    assert table.locator("thead th").first.inner_text() == "Run (EM points, 0–100)"  # the unit, in the header
    pages.shoot("compare-question-sets")
    pages.assert_no_errors("the compare page with different questions")


def scored(run, benchmark, answers):
    """An evaluation that kept its answers: question id → exact match (F1 the same)."""
    evaluation = EvaluationFactory(run=run, benchmark=benchmark, value=0.0, n=len(answers))
    EvaluationAnswer.objects.bulk_create(
        EvaluationAnswer(evaluation=evaluation, question_id=question, em=em, f1=em) for question, em in answers.items()
    )
