"""`data:<name>[@<version>]` in configs: runs, experiment arms and evaluations name uploaded data; the stored config
pins the version; unknown names, the wrong kind and a missing split are 400s that list what exists; a run on a
dataset with a test split is evaluated on it by default; another team's data cannot be named."""

from __future__ import annotations

import pytest

from tests.webapp.data.conftest import corpus, jsonl, questions, upload
from webapp.data.models import DatasetUse
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def alices_data(alice, api):
    client = api(alice)
    upload(client, jsonl(questions(8)), name="mine")
    upload(client, jsonl(questions(4, prefix="t")), name="mine", split="test")
    upload(client, jsonl(questions(5, prefix="b")), name="bench", split="test")
    upload(client, jsonl(corpus(12)), filename="wiki.jsonl", name="wiki", kind="corpus")
    return client


def submit(client, **overrides):
    return client.post("/api/v1/runs/", {"name": "r", "preset": "smoke", "overrides": overrides}, format="json")


def test_a_run_names_uploaded_data_and_the_stored_config_pins_each_version(alices_data):
    overrides = {"env.dataset": "data:mine", "env.corpus": "data:wiki", "eval.benchmarks": ["data:bench", "builtin"]}
    response = submit(alices_data, **overrides)
    assert response.status_code == 201, response.json()
    run = Run.objects.get()
    assert run.config["env"]["dataset"] == "data:mine@2" and run.config["env"]["corpus"] == "data:wiki@1"
    assert run.config["eval"]["benchmarks"] == ["data:bench@1", "builtin"]
    used = {(u.version.dataset.name, u.version.split) for u in DatasetUse.objects.filter(run=run)}
    assert used == {("mine", "train"), ("wiki", "corpus"), ("bench", "test")}
    # a re-upload makes a new version; the run keeps the one it pinned
    upload(alices_data, jsonl(questions(9)), name="mine")
    run.refresh_from_db()
    assert run.config["env"]["dataset"] == "data:mine@2"


def test_a_run_on_data_with_a_test_split_is_evaluated_on_it_by_default(alices_data):
    assert submit(alices_data, **{"env.dataset": "data:mine"}).status_code == 201
    assert Run.objects.get().config["eval"]["benchmarks"] == ["data:mine@2", "builtin"]


def test_benchmarks_the_run_names_are_kept_as_named(alices_data):
    assert submit(alices_data, **{"env.dataset": "data:mine", "eval.benchmarks": ["builtin"]}).status_code == 201
    assert Run.objects.get().config["eval"]["benchmarks"] == ["builtin"]


def test_an_explicit_version_is_kept_and_one_that_does_not_exist_is_refused(alices_data):
    assert submit(alices_data, **{"env.dataset": "data:mine@1", "eval.benchmarks": []}).status_code == 201
    response = submit(alices_data, **{"env.dataset": "data:mine@7"})
    assert response.status_code == 400 and "has versions 1 to 2" in response.json()["config"]["env.dataset"][0]


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"env.dataset": "data:nope"}, "env.dataset", "your team can name data:bench, data:mine, data:wiki"),
        ({"env.dataset": "data:wiki"}, "env.dataset", "is a corpus dataset; this field needs questions"),
        ({"env.corpus": "data:mine"}, "env.corpus", "is a questions dataset; this field needs corpus"),
        ({"env.dataset": "data:bench"}, "env.dataset", "has no 'train' split"),
        ({"eval.benchmarks": ["data:mine"], "eval.split": "dev"}, "eval.benchmarks", "has no 'dev' split"),
        ({"env.dataset": "data:../x"}, "env.dataset", "name data as data:<name>"),
    ],
)
def test_a_reference_that_cannot_be_used_is_a_400_naming_the_field(alices_data, overrides, field, message):
    response = submit(alices_data, **overrides)
    assert response.status_code == 400, response.json()
    assert message in " ".join(response.json()["config"][field]), response.json()
    assert not Run.objects.exists()


def test_another_teams_data_cannot_be_named(alices_data, bob, api):
    response = submit(api(bob), **{"env.dataset": "data:mine"})
    assert response.status_code == 400
    assert "no dataset of that name; your team can name none yet" in response.json()["config"]["env.dataset"][0]


def test_an_experiment_arm_and_its_evaluation_name_data(alices_data):
    spec = {
        "name": "exp", "preset": "smoke", "arms": {"static": None, "own": {"env.dataset": "data:mine"}}, "seeds": 1,
        "evaluation": {"benchmark": "data:bench"},
    }  # fmt: skip
    response = alices_data.post("/api/v1/experiments/", spec, format="json")
    assert response.status_code == 201, response.json()
    runs = {r.arm: r for r in Run.objects.all()}
    assert runs["own"].config["env"]["dataset"] == "data:mine@2"
    assert all(r.config["eval"]["benchmarks"] == ["data:bench@1"] for r in runs.values())
    # The experiment names its benchmark as its runs do, pinned (#54 item 6), and its estimate counts the 5 questions.
    experiment = alices_data.get(f"/api/v1/experiments/{response.json()['id']}/").json()
    assert experiment["experiment"]["evaluation"]["benchmarks"] == ["data:bench@1"]
    assert experiment["results"]["benchmarks"] == ["data:bench@1"]
    assert experiment["timing"]["estimate"]["questions"] == 5


def test_shared_data_is_named_by_every_team_and_a_teams_own_name_comes_first(alice, bob, api, settings, tmp_path):
    from django.core.management import call_command

    shared = tmp_path / "data" / "shared" / "nq"
    shared.mkdir(parents=True)
    (shared / "test.jsonl").write_bytes(jsonl(questions(6, prefix="nq")))
    (shared / "train.jsonl").write_bytes(jsonl(questions(7, prefix="nqt")))
    call_command("register_shared_data", str(shared), "--name", "nq", "--kind", "questions")
    for user in (alice, bob):
        response = submit(api(user), **{"env.dataset": "data:nq", "eval.benchmarks": ["data:nq"]})
        assert response.status_code == 201, response.json()
    assert {r.config["env"]["dataset"] for r in Run.objects.all()} == {"data:shared/nq@2"}
    upload(api(alice), jsonl(questions(3)), name="nq")  # alice's own nq shadows the shared one
    assert submit(api(alice), **{"env.dataset": "data:nq", "eval.benchmarks": []}).json()["config"]["env"][
        "dataset"
    ] == ("data:nq@1")
    explicit = submit(api(alice), **{"env.dataset": "data:shared/nq", "eval.benchmarks": []})
    assert explicit.json()["config"]["env"]["dataset"] == "data:shared/nq@2"


def test_the_command_refuses_a_file_outside_the_shared_directory_and_a_bad_file(tmp_path):
    from django.core.management import CommandError, call_command

    outside = tmp_path / "elsewhere.jsonl"
    outside.write_bytes(jsonl(questions(2)))
    with pytest.raises(CommandError, match="does not lie under INSPO_SHARED_DATA_DIR"):
        call_command("register_shared_data", str(outside), "--name", "x", "--kind", "questions")
    bad = tmp_path / "data" / "shared" / "bad.jsonl"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(jsonl(questions(2)) + b'{"id": "z", "question": "q"}\n')
    with pytest.raises(CommandError, match="line 3: field 'golden_answers'"):
        call_command("register_shared_data", str(bad), "--name", "x", "--kind", "questions")


def test_a_clone_keeps_the_version_its_source_pinned(alices_data):
    source = submit(alices_data, **{"env.dataset": "data:mine", "eval.benchmarks": ["data:bench"]}).json()
    upload(alices_data, jsonl(questions(9)), name="mine")  # version 3 of mine now exists
    clone = alices_data.post(f"/api/v1/runs/{source['id']}/clone/", {"name": "again"}, format="json")
    assert clone.status_code == 201, clone.json()
    config = Run.objects.get(pk=clone.json()["id"]).config
    assert config["env"]["dataset"] == "data:mine@2" and config["eval"]["benchmarks"] == ["data:bench@1"]
    assert DatasetUse.objects.filter(run_id=clone.json()["id"]).count() == 2


def test_the_experiment_form_offers_the_teams_data_and_its_runs_use_it(alices_data, alice, alice_team, client):
    client.force_login(alice)
    page = client.get("/experiments/new/").content.decode()
    assert 'value="data:mine"' in page and 'value="data:bench"' in page
    assert page.count('value="data:wiki"') == 1  # the corpus choice only (#54 item 2)
    form = {
        "team": alice_team.pk, "name": "own", "preset": "smoke", "arms": ["static", "inspo"], "seeds": 1,
        "baseline": "static", "dataset": "data:mine", "data_benchmarks": ["data:bench"], "benchmarks": "builtin",
        "questions": 0,
    }  # fmt: skip
    response = client.post("/experiments/new/", form)
    assert response.status_code == 302, response.content.decode()[-3000:]
    runs = Run.objects.filter(experiment__name="own")
    assert runs.count() == 2
    assert {r.config["env"]["dataset"] for r in runs} == {"data:mine@2"}
    assert all(r.config["eval"]["benchmarks"] == ["builtin", "data:bench@1"] for r in runs)


class _ToSQLite:
    """Routes every query to the `sqlite` connection."""

    def db_for_read(self, model, **hints):
        return "sqlite"

    db_for_write = db_for_read

    def allow_relation(self, *objects, **hints):
        return True


@pytest.fixture
def on_sqlite(db, settings):
    """The data tables in an in-memory SQLite database, as `make run` uses, with every query routed there: SQLite
    sorts NULL first where PostgreSQL sorts it last."""
    from django.contrib.auth import get_user_model
    from django.db import connections
    from django.db.utils import ConnectionHandler

    from webapp.accounts.models import Team
    from webapp.data.models import Dataset, DatasetVersion

    sqlite = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
    connection = ConnectionHandler({"default": sqlite})["default"]
    connections["sqlite"] = connection
    with connection.schema_editor() as editor:
        for model in (get_user_model(), Team, Dataset, DatasetVersion):
            editor.create_model(model)
    settings.DATABASE_ROUTERS = [_ToSQLite()]
    yield
    connection.close()
    del connections["sqlite"]


def test_a_teams_own_dataset_comes_before_the_shared_one_of_the_same_name_on_sqlite(on_sqlite):
    from webapp.accounts.models import Team
    from webapp.data.models import Dataset, DatasetVersion
    from webapp.data.references import data_choices, data_snapshot

    team = Team.objects.create(name="Alice's team", slug="alices")
    for owner in (None, team):  # the shared one first, as the operator registers it before the team uploads
        dataset = Dataset.objects.create(team=owner, name="nq", kind="questions")
        DatasetVersion.objects.create(
            dataset=dataset, number=1, split="train", sha256=f"{owner is None:064}", file="x", size_bytes=1,
            records=1, source_name="x.jsonl", source_format="jsonl",
        )  # fmt: skip
    snapshot = data_snapshot("data:nq", team=team, field="env.dataset", kind="questions")
    assert snapshot.dataset.team == team and snapshot.reference == "data:nq@1"
    assert data_snapshot("data:nq@1", team=team, field="env.dataset", kind="questions").dataset.team == team
    assert data_snapshot("data:shared/nq", team=team, field="env.dataset", kind="questions").dataset.shared
    assert data_choices(Team.objects.filter(pk=team.pk), "questions") == ["data:nq", "data:shared/nq"]
