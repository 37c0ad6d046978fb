"""Run pages: the submission form (engine errors next to their field), the list (filters, sorting, actions), and
the shells the dashboards mount on — detail, lineage, trajectories, compare — with their permissions."""

from __future__ import annotations

import json
import re
import uuid
from html import unescape

import pytest
from django.test import Client
from django.urls import reverse

from tests.factories import CheckpointFactory, RunFactory
from webapp.runs.forms import CONFIG_FIELDS
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


def signed_in(user):
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@pytest.fixture
def browser(alice):
    return signed_in(alice)


@pytest.fixture
def running(alice, alice_team):
    return RunFactory(team=alice_team, creator=alice, name="alices running run", status=Run.Status.RUNNING)


@pytest.fixture
def other(bob, bob_team):
    return RunFactory(team=bob_team, creator=bob, name="bobs run", status=Run.Status.RUNNING)


def has_testid(html: str, testid: str) -> bool:
    return f'data-testid="{testid}"' in html


def field_errors(html: str, field: str) -> str:
    """The text of the form row holding `field`."""
    match = re.search(rf'<label for="id_{field}">.*?</div>', html, re.S)
    assert match, f"no row for {field}"
    return match.group(0)


def test_the_form_submits_a_preset_with_changes(browser, alice_team, enqueued, django_capture_on_commit_callbacks):
    form = {"team": alice_team.pk, "name": "from the form", "tags": "ui, smoke", "preset": "smoke", "lr": "2e-6"}
    with django_capture_on_commit_callbacks(execute=True):
        response = browser.post(reverse("runs:new"), form)
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("runs:detail", kwargs={"run_id": run.pk})
    assert run.config["grpo"]["lr"] == 2e-6 and sorted(t.name for t in run.tags.all()) == ["smoke", "ui"]
    assert enqueued == [("workers.tasks.run_training", [str(run.pk)], "cpu")]


def test_engine_errors_appear_next_to_their_field_and_nothing_is_submitted(browser, alice_team, enqueued):
    form = {"team": alice_team.pk, "name": "bad", "preset": "smoke", "group_size": "1", "overrides": '{"top_k": 0}'}
    response = browser.post(reverse("runs:new"), form)
    html = response.content.decode()
    assert response.status_code == 400
    assert "must be ≥ 2 and ≤ 64, got 1" in field_errors(html, "group_size")
    assert "env.top_k: must be ≥ 1" in field_errors(html, "overrides")
    assert not Run.objects.exists() and enqueued == []


def test_the_platforms_refusals_appear_next_to_their_field_too(browser, alice_team, enqueued):
    form = {
        "team": alice_team.pk,
        "name": "paths",
        "preset": "smoke",
        "model": "/etc/passwd",
        "overrides": '{"env.corpus": "../../other-team/corpus.jsonl"}',
    }
    response = browser.post(reverse("runs:new"), form)
    html = unescape(response.content.decode())
    assert response.status_code == 400
    assert "'/etc/passwd': file paths must lie in your team's data directory" in field_errors(html, "model")
    assert "env.corpus: '../../other-team/corpus.jsonl': file paths must lie" in field_errors(html, "overrides")
    assert not Run.objects.exists() and enqueued == []


def test_the_form_rejects_broken_json(browser, alice_team):
    form = {"team": alice_team.pk, "name": "bad", "preset": "smoke", "overrides": "{oops"}
    response = browser.post(reverse("runs:new"), form)
    assert response.status_code == 400 and "not valid JSON" in field_errors(response.content.decode(), "overrides")


def test_the_run_pages_of_a_trained_run_mount_the_dashboards(browser, scripted_run):
    run_id = scripted_run.pk
    detail = browser.get(reverse("runs:detail", kwargs={"run_id": run_id})).content.decode()
    assert scripted_run.best_instruction.key in detail and "sha256" in detail
    assert 'data-page="run"' in detail and "inspo/app/main.js" in detail
    for testid in ("run-status", "run-progress", "chart-reward_mean", "chart-population", "download-best-instruction"):
        assert has_testid(detail, testid), testid
    lineage = browser.get(reverse("runs:lineage", kwargs={"run_id": run_id})).content.decode()
    assert 'data-page="lineage"' in lineage and "Evolution rounds" in lineage
    assert has_testid(lineage, "lineage-critique") and has_testid(lineage, "lineage-diff")
    trajectories = browser.get(reverse("runs:trajectories", kwargs={"run_id": run_id}), {"step": "2"})
    assert trajectories.status_code == 200
    assert re.search(r'<option value="2" selected>', trajectories.content.decode())


def test_the_trajectory_page_picks_the_newest_step_when_the_address_names_none_or_a_bad_one(browser, scripted_run):
    url = reverse("runs:trajectories", kwargs={"run_id": scripted_run.pk})
    newest = scripted_run.trajectories.order_by("-step").values_list("step", flat=True).first()
    for query in ({}, {"step": "oops"}, {"step": "999"}):
        html = browser.get(url, query).content.decode()
        assert f'<option value="{newest}" selected>' in html, query


def test_pages_of_a_run_without_any_data_render(browser, running):
    for name in ("runs:detail", "runs:lineage", "runs:trajectories"):
        response = browser.get(reverse(name, kwargs={"run_id": running.pk}))
        assert response.status_code == 200, name
    html = browser.get(reverse("runs:trajectories", kwargs={"run_id": running.pk})).content.decode()
    assert "none yet" in html


def test_the_list_filters_by_status(browser, scripted_run):
    assert scripted_run.name in browser.get(reverse("runs:list"), {"status": "finished"}).content.decode()
    assert scripted_run.name not in browser.get(reverse("runs:list"), {"status": "queued"}).content.decode()


def names_in_order(html: str) -> list[str]:
    return re.findall(
        r'<td><a class="name-cut" href="/runs/[0-9a-f-]+/" title="[^"]*" data-testid="run-name">([^<]+)</a>', html
    )


def test_the_list_filters_by_preset_and_sorts(browser, alice, alice_team):
    for name, preset in (("b-run", "smoke"), ("a-run", "cpu-demo"), ("c-run", "smoke")):
        RunFactory(team=alice_team, creator=alice, name=name, preset=preset)
    assert names_in_order(browser.get(reverse("runs:list"), {"ordering": "name"}).content.decode()) == [
        "a-run",
        "b-run",
        "c-run",
    ]
    assert names_in_order(browser.get(reverse("runs:list"), {"ordering": "-name"}).content.decode())[0] == "c-run"
    smoke = browser.get(reverse("runs:list"), {"preset": "smoke", "ordering": "name"}).content.decode()
    assert names_in_order(smoke) == ["b-run", "c-run"]
    newest_first = names_in_order(browser.get(reverse("runs:list"), {"ordering": "nonsense"}).content.decode())
    assert newest_first == ["c-run", "a-run", "b-run"]


def test_the_list_offers_actions_that_apply_to_each_run(browser, alice, alice_team, running):
    CheckpointFactory(run=RunFactory(team=alice_team, creator=alice, name="failed one", status=Run.Status.FAILED))
    never = RunFactory(team=alice_team, creator=alice, name="failed at once", status=Run.Status.FAILED)
    html = browser.get(reverse("runs:list")).content.decode()
    assert reverse("runs:resume", kwargs={"run_id": never.pk}) not in html  # no checkpoint: nothing to resume
    assert has_testid(html, "bulk-cancel") and has_testid(html, "submit-run")
    assert f'name="select-run" value="{running.pk}"' in html
    assert html.count('name="select-run"') == 1  # only the active run can be cancelled
    assert reverse("runs:cancel", kwargs={"run_id": running.pk}) in html
    failed = Run.objects.get(name="failed one")
    assert reverse("runs:resume", kwargs={"run_id": failed.pk}) in html
    assert reverse("runs:cancel", kwargs={"run_id": failed.pk}) not in html


def test_a_viewer_sees_no_submit_or_cancel_buttons(alice, victor, running):
    viewer = signed_in(victor)
    listing = viewer.get(reverse("runs:list")).content.decode()
    assert running.name in listing
    assert reverse("runs:new") not in listing and not has_testid(listing, "bulk-cancel")
    assert reverse("runs:cancel", kwargs={"run_id": running.pk}) not in listing
    assert 'name="select-run"' not in listing
    pages = [
        reverse(name, kwargs={"run_id": running.pk}) for name in ("runs:detail", "runs:lineage", "runs:trajectories")
    ]
    for page in [*pages, reverse("runs:compare") + f"?runs={running.pk}"]:
        html = viewer.get(page).content.decode()
        assert reverse("runs:new") not in html and "runs/new" not in html, page
        assert reverse("runs:cancel", kwargs={"run_id": running.pk}) not in html, page
        assert not has_testid(html, "cancel-run"), page


@pytest.mark.parametrize("name", ["runs:lineage", "runs:detail", "runs:trajectories"])
def test_run_pages_are_for_the_runs_team_only(name, running, bob):
    target = reverse(name, kwargs={"run_id": running.pk})
    anonymous = signed_in(None).get(target)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith(reverse("accounts:login"))
    assert signed_in(bob).get(target).status_code == 404


def test_the_compare_page_names_the_chosen_runs(browser, alice, alice_team, running):
    second = RunFactory(team=alice_team, creator=alice, name="second")
    response = browser.get(reverse("runs:compare"), {"runs": [str(running.pk), f"{second.pk},{running.pk}"]})
    html = response.content.decode()
    assert response.status_code == 200 and 'data-page="compare"' in html
    chosen = re.search(r'<script id="compare-selection" type="application/json">(.*?)</script>', html)
    assert chosen and json.loads(chosen.group(1)) == [str(running.pk), str(second.pk)]
    empty = browser.get(reverse("runs:compare")).content.decode()
    assert has_testid(empty, "compare-empty") and has_testid(empty, "run-picker")


def test_the_compare_page_refuses_runs_the_user_cannot_see(browser, running, other):
    compare = reverse("runs:compare")
    anonymous = signed_in(None).get(compare, {"runs": str(running.pk)})
    assert anonymous.status_code == 302 and anonymous["Location"].startswith(reverse("accounts:login"))
    assert browser.get(compare, {"runs": [str(running.pk), str(other.pk)]}).status_code == 404
    assert browser.get(compare, {"runs": "not-a-uuid"}).status_code == 404
    assert browser.get(compare, {"runs": [str(uuid.uuid4())]}).status_code == 404
    too_many = [str(running.pk)] + [str(uuid.uuid4()) for _ in range(12)]
    assert browser.get(compare, {"runs": too_many}).status_code == 404


def preset_shown(html: str) -> dict[str, str]:
    """What the form shows of the chosen preset, field by field, in the field itself: an input's placeholder, the
    text of a select's keep-the-preset choice, the note beside a group of checkboxes ("—" where the preset sets
    nothing)."""
    shown: dict[str, str] = {}
    for name in CONFIG_FIELDS:
        note = re.search(rf'<span class="help preset-value" data-field="{name}">Preset: ([^<]*)\.</span>', html)
        keep = re.search(rf'<select name="{name}"[^>]*>\s*<option value=""[^>]*>([^<]*)</option>', html)
        placeholder = re.search(rf'<input [^>]*name="{name}"[^>]*placeholder="([^"]*)"', html) or re.search(
            rf'<input [^>]*placeholder="([^"]*)"[^>]*name="{name}"', html
        )
        if note:
            shown[name] = unescape(note.group(1)).replace("none", "—")
        elif keep:
            text = unescape(keep.group(1))
            shown[name] = text.removeprefix("(preset: ").removesuffix(")") if text != "(preset)" else "—"
        elif placeholder:
            shown[name] = unescape(placeholder.group(1)) or "—"
    assert set(shown) == set(CONFIG_FIELDS), set(CONFIG_FIELDS) - set(shown)
    return shown


def test_the_form_shows_the_chosen_presets_values(browser, alice_team):
    html = browser.get(reverse("runs:new")).content.decode()
    shown = preset_shown(html)
    assert shown["total_steps"] == "12" and shown["group_size"] == "4" and shown["backend"] == "torch"  # quick
    assert shown["lr"] == "1e-05" and shown["optimizer_endpoint"] == "—" and shown["benchmarks"] == "builtin"
    assert 'data-page="new"' in html
    presets = json.loads(unescape(re.search(r'data-presets="([^"]*)"', html).group(1)))
    assert set(presets) == {"paper", "cpu-demo", "quick", "smoke"}
    assert presets["smoke"]["total_steps"] == "4" and presets["paper"]["total_steps"] != "4"
    assert presets["smoke"]["optimizer_endpoint"] is None

    # A refused form keeps the preset the user chose, and its values.
    refused = browser.post(reverse("runs:new"), {"team": alice_team.pk, "name": "", "preset": "paper"})
    assert refused.status_code == 400
    assert preset_shown(refused.content.decode())["total_steps"] == presets["paper"]["total_steps"]


def test_the_form_lists_the_presets_values_once(browser):
    """Once, in the fields: no separate list of them repeats what the fields show."""
    html = browser.get(reverse("runs:new")).content.decode()
    assert not has_testid(html, "preset-summary") and "The preset's values" not in html
    assert html.count('placeholder="12"') == 1  # total steps, nowhere else


def test_the_form_starts_with_a_name_so_its_default_submit_goes_through(
    browser, alice_team, enqueued, django_capture_on_commit_callbacks
):
    html = browser.get(reverse("runs:new")).content.decode()
    name = re.search(r'<input[^>]*name="name"[^>]*>', html).group(0)
    value = re.search(r'value="([^"]*)"', name).group(1)
    assert re.fullmatch(r"quick-\d{8}-\d{4}", value) and " required" in name
    form = {"team": str(alice_team.pk), "name": value, "preset": "quick"}  # what the untouched form sends
    with django_capture_on_commit_callbacks(execute=True):
        response = browser.post(reverse("runs:new"), form)
    assert response.status_code == 302 and Run.objects.get().name == value


def test_the_forms_required_fields_are_marked(browser):
    html = browser.get(reverse("runs:new")).content.decode()
    marked = set(re.findall(r'<label for="id_(\w+)">[^<]*<span class="required" aria-hidden="true"> \*</span>', html))
    assert marked == {"team", "name", "preset"}
    assert "Fields marked" in html


def test_clone_in_the_list_asks_before_it_queues_a_run(
    browser, alice, alice_team, enqueued, django_capture_on_commit_callbacks
):
    source = RunFactory(team=alice_team, creator=alice, name="to clone", status=Run.Status.FINISHED, total_steps=4)
    confirm = reverse("runs:clone", kwargs={"run_id": source.pk})
    listing = browser.get(reverse("runs:list")).content.decode()
    assert f'href="{confirm}"' in listing and f'action="{confirm}"' not in listing

    page = browser.get(confirm)
    html = page.content.decode()
    assert page.status_code == 200 and has_testid(html, "confirm-clone")
    assert "4 steps of the torch backend on the cpu queue" in html and "to clone" in html
    assert Run.objects.count() == 1 and enqueued == []

    with django_capture_on_commit_callbacks(execute=True):
        queued = browser.post(confirm, {"name": "", "tags": "", "overrides": ""})
    clone = Run.objects.get(cloned_from=source)
    assert queued.status_code == 302 and queued["Location"] == reverse("runs:detail", kwargs={"run_id": clone.pk})
    assert clone.name == "to clone (clone)" and enqueued == [("workers.tasks.run_training", [str(clone.pk)], "cpu")]


def test_only_members_of_the_runs_team_see_the_clone_page(alice, alice_team, victor, bob):
    source = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED)
    confirm = reverse("runs:clone", kwargs={"run_id": source.pk})
    assert signed_in(victor).get(confirm).status_code == 403
    assert signed_in(bob).get(confirm).status_code == 404
    assert signed_in(None).get(confirm).status_code == 302
    assert Run.objects.count() == 1


def test_a_refused_clone_shows_its_page_again_with_the_input_and_the_error_beside_it(
    browser, alice, alice_team, settings, tmp_path
):
    from inspo_engine.presets import preset

    settings.INSPO_DATA_DIR = tmp_path / "data"
    source = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED, config=preset("smoke").to_dict())
    confirm = reverse("runs:clone", kwargs={"run_id": source.pk})
    response = browser.post(confirm, {"name": "again", "overrides": '{"env.dataset": "gone.jsonl"}'})
    html = response.content.decode()
    assert response.status_code == 400 and has_testid(html, "confirm-clone") and 'value="again"' in html
    row = field_errors(html, "overrides")
    assert "env.dataset: &#x27;gone.jsonl&#x27; does not exist in your team&#x27;s data directory" in row
    assert str(tmp_path) not in row and Run.objects.count() == 1


# -- Table 1 on the run page ------------------------------------------------------------------------------------------


@pytest.fixture
def evaluated(alice, alice_team):
    """Evaluated at step 2 on nq, then at its end on nq (EM ¼ over 4 questions) and hotpotqa (EM 1 over 2)."""
    from tests.factories import EvaluationFactory
    from webapp.runs.models import EvaluationAnswer

    run = RunFactory(team=alice_team, creator=alice, name="evaluated", status=Run.Status.FINISHED)
    for step, benchmark, ems in [(2, "nq", [0, 0, 0, 1]), (4, "nq", [1, 0, 0, 0]), (4, "hotpotqa", [1, 1])]:
        evaluation = EvaluationFactory(run=run, step=step, benchmark=benchmark, value=0.99, n=len(ems))
        EvaluationAnswer.objects.bulk_create(
            EvaluationAnswer(evaluation=evaluation, question_id=f"q{i}", em=em, f1=em) for i, em in enumerate(ems)
        )
    return run


def table_cells(html: str, row: str) -> dict[str, str]:
    """A row of the run page's Table 1: column → the cell's text."""
    match = re.search(rf'data-testid="table-row-{row}">(.*?)</tr>', html, re.S)
    assert match, f"no {row} row"
    return dict(re.findall(r'data-column="([^"]+)">([^<]*)</td>', match.group(1)))


def test_the_run_page_shows_table_1_with_each_benchmark_and_the_unweighted_average(browser, evaluated):
    html = browser.get(reverse("runs:detail", kwargs={"run_id": evaluated.pk})).content.decode()
    assert has_testid(html, "run-table") and 'data-step="final"' in html
    # in EM points, the verdicts' unit, which the header names
    assert table_cells(html, "em") == {"hotpotqa": "100.0", "nq": "25.0", "average": "62.5"}  # not 3/6 = 50.0
    assert table_cells(html, "f1") == {"hotpotqa": "100.0", "nq": "25.0", "average": "62.5"}
    assert '<th scope="col">Metric (points, 0–100)</th>' in html
    assert '<option value="2">step 2</option>' in html and "Avg." in html


def test_the_run_page_shows_table_1_of_a_chosen_step_and_says_why_it_cannot_show_another(browser, evaluated):
    page = reverse("runs:detail", kwargs={"run_id": evaluated.pk})
    at_two = browser.get(page, {"table_step": "2"}).content.decode()
    assert 'data-step="2"' in at_two and table_cells(at_two, "em") == {"nq": "25.0", "average": "25.0"}
    assert '<option value="2" selected>' in at_two
    for asked in ("3", "two"):
        html = browser.get(page, {"table_step": asked}).content.decode()
        assert has_testid(html, "table-error") and 'data-step="final"' in html, asked
    assert (
        "no evaluation at step 3 (steps with evaluations: 2, 4)"
        in browser.get(page, {"table_step": "3"}).content.decode()
    )


def test_a_run_without_evaluations_says_its_table_is_empty(browser, running):
    html = browser.get(reverse("runs:detail", kwargs={"run_id": running.pk})).content.decode()
    assert has_testid(html, "table-empty") and not has_testid(html, "run-table")


# -- resume only with a checkpoint; the evaluate form keeps its input beside its errors (#45 item 3) ----------------


def test_resume_is_offered_only_for_a_stopped_run_with_a_checkpoint(browser, alice, alice_team, api):
    never = RunFactory(team=alice_team, creator=alice, name="never checkpointed", status=Run.Status.FAILED)
    saved = RunFactory(team=alice_team, creator=alice, name="checkpointed", status=Run.Status.CANCELLED)
    CheckpointFactory(run=saved)
    page = browser.get(reverse("runs:detail", kwargs={"run_id": never.pk})).content.decode()
    assert not has_testid(page, "resume-run") and has_testid(page, "no-resume")
    assert "clone the run to start over" in page
    page = browser.get(reverse("runs:detail", kwargs={"run_id": saved.pk})).content.decode()
    assert has_testid(page, "resume-run") and not has_testid(page, "no-resume")

    refused = api(alice).post(f"/api/v1/runs/{never.pk}/resume/")
    assert refused.status_code == 409 and "no checkpoint to resume from" in refused.json()["detail"]
    never.refresh_from_db()
    assert never.status == Run.Status.FAILED


def test_resume_of_another_teams_run_is_a_404(alice, alice_team, bob, api):
    saved = RunFactory(team=alice_team, creator=alice, status=Run.Status.FAILED)
    CheckpointFactory(run=saved)
    assert api(bob).post(f"/api/v1/runs/{saved.pk}/resume/").status_code == 404
    assert signed_in(bob).post(reverse("runs:resume", kwargs={"run_id": saved.pk})).status_code == 404
    saved.refresh_from_db()
    assert saved.status == Run.Status.FAILED


def evaluate_box(html: str) -> str:
    """The run page's "Evaluate a checkpoint" box."""
    match = re.search(r'<details data-testid="evaluate"[^>]*>.*?</details>', html, re.S)
    assert match, "no evaluate box"
    return match.group(0)


def test_a_refused_evaluation_stays_open_with_its_input_and_the_error_beside_the_field(
    browser, alice, alice_team, settings, tmp_path
):
    from webapp.runs.models import EvaluationRequest

    settings.INSPO_DATA_DIR = tmp_path / "data"
    run = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED)
    CheckpointFactory(run=run)
    url = reverse("runs:evaluate", kwargs={"run_id": run.pk})
    response = browser.post(url, {"benchmarks": "builtin, nq/test.jsonl", "limit": "7"})
    assert response.status_code == 400
    box = evaluate_box(response.content.decode())
    assert box.startswith('<details data-testid="evaluate" open>')
    assert 'value="builtin, nq/test.jsonl"' in box and 'value="7"' in box
    row = field_errors(box, "benchmarks")
    assert "errorlist" in row and "&#x27;nq/test.jsonl&#x27; does not exist in your team&#x27;s data directory" in row
    assert str(tmp_path) not in box and str(settings.INSPO_DATA_DIR) not in box
    assert not EvaluationRequest.objects.exists()

    not_a_number = browser.post(url, {"benchmarks": "builtin", "limit": "many"})
    assert not_a_number.status_code == 400 and "errorlist" in field_errors(
        evaluate_box(not_a_number.content.decode()), "limit"
    )

    accepted = browser.post(url, {"benchmarks": "builtin"})
    assert accepted.status_code == 302 and EvaluationRequest.objects.count() == 1
    page = browser.get(accepted["Location"]).content.decode()
    assert "Evaluation queued." in page and 'data-testid="evaluate">' in page  # closed again


def test_an_evaluation_a_run_cannot_take_says_why_in_the_open_form(browser, alice, alice_team):
    run = RunFactory(team=alice_team, creator=alice, status=Run.Status.FAILED)  # no checkpoint
    response = browser.post(reverse("runs:evaluate", kwargs={"run_id": run.pk}), {"benchmarks": "builtin"})
    assert response.status_code == 400
    box = evaluate_box(response.content.decode())
    assert " open>" in box.split("\n")[0] and "the run has no checkpoint yet" in box


def test_another_teams_run_cannot_be_evaluated_from_the_page(alice, alice_team, bob):
    from webapp.runs.models import EvaluationRequest

    run = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED)
    CheckpointFactory(run=run)
    response = signed_in(bob).post(reverse("runs:evaluate", kwargs={"run_id": run.pk}), {"benchmarks": "builtin"})
    assert response.status_code == 404 and not EvaluationRequest.objects.exists()


# -- long names: refused past 200 characters, never cut silently; cut with an ellipsis in lists (#45 item 4) --------


def name_input(html: str) -> str:
    match = re.search(r'<input[^>]*name="name"[^>]*>', html)
    assert match, "no name input"
    return match.group(0)


def test_a_run_name_past_200_characters_is_refused_with_a_message_not_cut(browser, alice_team):
    assert "maxlength" not in name_input(browser.get(reverse("runs:new")).content.decode())
    response = browser.post(reverse("runs:new"), {"team": alice_team.pk, "name": "n" * 5000, "preset": "smoke"})
    assert response.status_code == 400 and not Run.objects.exists()
    row = field_errors(response.content.decode(), "name")
    assert "at most 200 characters (it has 5000)" in row
    assert "At most 200 characters." in row  # said before typing, too


def test_a_clone_name_past_200_characters_is_refused_with_a_message(browser, alice, alice_team):
    source = RunFactory(team=alice_team, creator=alice, status=Run.Status.FINISHED)
    confirm = reverse("runs:clone", kwargs={"run_id": source.pk})
    assert "maxlength" not in name_input(browser.get(confirm).content.decode())
    response = browser.post(confirm, {"name": "n" * 201})
    assert response.status_code == 400 and "at most 200 characters (it has 201)" in response.content.decode()
    assert Run.objects.count() == 1


def test_lists_cut_a_long_name_and_keep_it_whole_in_its_title(browser, alice, alice_team):
    long = "a long run name " * 12 + "end"
    run = RunFactory(team=alice_team, creator=alice, name=long)
    html = browser.get(reverse("runs:list")).content.decode()
    link = re.search(r'<a class="name-cut"[^>]*data-testid="run-name"[^>]*>', html).group(0)
    assert f'title="{long}"' in link and reverse("runs:detail", kwargs={"run_id": run.pk}) in link
