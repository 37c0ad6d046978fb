"""The New run and New experiment forms: a retriever choice beside the corpus (whatever `env.retriever` allows) that
sets `env.retriever`, with a line saying whether the chosen corpus's newest version has an index for it (built,
being built, queued, none yet, or its last job failed); training data offers only questions with a train split; the
experiment form has a corpus too and marks its required fields (#54 items 2 and 8)."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest
from django.test import Client
from django.urls import reverse

from webapp.accounts.models import Team
from webapp.data.models import Dataset, DatasetVersion, IndexJob
from webapp.experiments.forms import ExperimentForm
from webapp.runs.forms import RunForm
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


def dataset(team, name, kind, *splits, version=1):
    """A dataset's versions, one per split from `version` on, as uploads make them (no file is read here)."""
    made, _ = Dataset.objects.get_or_create(team=team, name=name, kind=kind)
    files = dict(file="x", size_bytes=1, records=12, source_name=f"{name}.jsonl", source_format="jsonl")
    return [
        DatasetVersion.objects.create(
            dataset=made, number=number, split=split, sha256=f"{name}{split}{number}".ljust(64, "0"), **files
        )
        for number, split in enumerate(splits, start=version)
    ]


def page(user, name):
    client = Client()
    client.force_login(user)
    response = client.get(reverse(name))
    assert response.status_code == 200
    return response.content.decode()


def states(html):
    return json.loads(unescape(re.search(r'data-index-states="([^"]*)"', html).group(1)))


def index_line(html):
    return unescape(re.search(r'data-testid="index-status"[^>]*>([^<]*)<', html).group(1))


def options(html, name):
    select = re.search(rf'<select name="{name}"[^>]*>(.*?)</select>', html, re.S).group(1)
    return re.findall(r'<option value="([^"]*)"', select)


def test_the_run_form_offers_each_retriever_and_says_whether_the_corpus_has_its_index(alice, alice_team, bob_team):
    (old,) = dataset(alice_team, "wiki", "corpus", "corpus")
    (new,) = dataset(alice_team, "wiki", "corpus", "corpus", version=2)
    IndexJob.objects.create(version=old, sha256=old.sha256, method="dense", status=IndexJob.Status.DONE)
    IndexJob.objects.create(version=new, sha256=new.sha256, method="bm25", status=IndexJob.Status.DONE)
    (news,) = dataset(alice_team, "news", "corpus", "corpus")
    IndexJob.objects.create(
        version=news, sha256=news.sha256, method="dense", status="running", passages_done=3, passages_total=12
    )
    dataset(bob_team, "secret", "corpus", "corpus")

    html = page(alice, "runs:new")
    assert options(html, "retriever") == ["", "dense", "bm25", "remote"]
    assert "(preset: dense)" in html and "data:secret" not in html  # another team's corpus is neither offered nor named
    texts = states(html)["texts"]
    assert set(texts) == {"builtin", "data:wiki", "data:news"}
    assert texts["data:wiki"]["bm25"].startswith("data:wiki@2 has a bm25 index")
    assert texts["data:wiki"]["dense"].startswith("data:wiki@2 has no dense index yet")  # v1's index is not v2's
    assert texts["data:news"]["dense"].startswith("data:news@1's dense index is being built (job")
    assert "3 / 12 passages): the run waits for it" in texts["data:news"]["dense"]
    assert index_line(html).startswith("The built-in corpus")  # the preset's corpus and retriever: builtin, dense


def test_the_chosen_retriever_sets_env_retriever_and_the_line_follows_the_choice(
    alice, alice_team, enqueued, django_capture_on_commit_callbacks
):
    dataset(alice_team, "wiki", "corpus", "corpus")
    client = Client()
    client.force_login(alice)
    form = {"team": alice_team.pk, "name": "bm25 run", "preset": "smoke", "corpus": "data:wiki", "retriever": "bm25"}
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("runs:new"), form)
    assert response.status_code == 302, unescape(response.content.decode())[-2000:]
    run = Run.objects.get()
    assert run.config["env"]["retriever"] == "bm25" and run.config["env"]["corpus"] == "data:wiki@1"

    refused = client.post(reverse("runs:new"), {**form, "name": ""}).content.decode()  # the form again
    assert index_line(refused).startswith(
        "data:wiki@1 has no bm25 index yet: the run starts its index job and waits for it"
    )


def test_training_data_is_offered_only_with_a_train_split_while_benchmarks_take_any(alice, alice_team):
    dataset(alice_team, "mine", "questions", "train", "test")
    dataset(alice_team, "bench", "questions", "test")
    teams = Team.objects.filter(pk=alice_team.pk)
    run_form = RunForm(teams=teams)
    assert [value for value, _ in run_form.fields["dataset"].choices] == ["", "builtin", "data:mine"]
    assert [value for value, _ in run_form.fields["benchmarks"].choices] == ["builtin", "data:bench", "data:mine"]
    experiment_form = ExperimentForm(teams=teams)
    assert [value for value, _ in experiment_form.fields["dataset"].choices] == ["", "builtin", "data:mine"]
    assert [value for value, _ in experiment_form.fields["data_benchmarks"].choices] == ["data:bench", "data:mine"]


def test_the_experiment_form_chooses_corpus_and_retriever_for_every_arm_and_marks_required_fields(alice, alice_team):
    dataset(alice_team, "wiki", "corpus", "corpus")
    teams = Team.objects.filter(pk=alice_team.pk)
    data = {"team": alice_team.pk, "name": "e", "preset": "smoke", "arms": ["static", "inspo"], "seeds": 2}
    data |= {"baseline": "static", "questions": 0, "corpus": "data:wiki", "retriever": "bm25"}
    form = ExperimentForm(data, teams=teams)
    assert form.is_valid(), form.errors
    assert form.spec()["overrides"] == {"env.corpus": "data:wiki", "env.retriever": "bm25"}

    html = page(alice, "experiments:new")
    assert options(html, "corpus") == ["", "builtin", "data:wiki"] and "bm25" in options(html, "retriever")
    assert states(html)["texts"]["data:wiki"]["bm25"].startswith("data:wiki@1 has no bm25 index yet")
    marked = set(re.findall(r'<label for="[^"]*">([^<]*)<span class="required"', html))
    assert marked == {"Name", "Preset", "Arms", "Seeds", "Baseline", "Questions"}
