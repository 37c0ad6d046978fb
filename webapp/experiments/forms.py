"""The New experiment form: a preset, a checkbox per built-in arm, a seed count, the benchmarks and shared overrides
(JSON); the engine validates the rest, and its errors land on the field they name. Its cost estimate is the
selectors' `experiment_estimate`, which the API also answers."""

from __future__ import annotations

import re
from typing import Any

from django import forms

from inspo_engine.experiments import BUILTIN_ARMS, MAX_BENCHMARKS, MAX_SEEDS
from webapp.accounts.models import Team
from webapp.core.errors import InvalidInput
from webapp.data.references import data_choices
from webapp.runs.configs import PRESET_NAMES
from webapp.runs.forms import RETRIEVER_HELP, NameField, OverridesField, literal_choices

from .models import MAX_EXPERIMENT_RUNS

ARM_CHOICES = [(name, name) for name in BUILTIN_ARMS]
ERROR_FIELDS = {
    "evaluation.benchmarks": "benchmarks",
    "evaluation.benchmark": "benchmarks",
    "evaluation.size": "questions",
}
"""The form field that shows an error of the experiment's field."""


class ExperimentForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    name = NameField()
    preset = forms.ChoiceField(choices=[(name, name) for name in PRESET_NAMES], initial="smoke")
    arms = forms.MultipleChoiceField(
        choices=ARM_CHOICES,
        widget=forms.CheckboxSelectMultiple,
        initial=["static", "inspo"],
        help_text="Each arm trains every seed.",
    )
    seeds = forms.IntegerField(
        min_value=1,
        max_value=MAX_SEEDS,
        initial=3,
        help_text=f"Seeds 0 … n−1 per arm: at most {MAX_SEEDS}, and at most {MAX_EXPERIMENT_RUNS} runs (arms × seeds).",
    )
    baseline = forms.ChoiceField(
        choices=ARM_CHOICES, initial="static", help_text="The arm the others are compared with."
    )
    dataset = forms.ChoiceField(
        required=False,
        label="Training questions",
        help_text="Every arm trains on them: the preset's (empty), builtin, your team's data or shared data.",
    )
    corpus = forms.ChoiceField(
        required=False,
        label="Corpus",
        help_text="The passages every arm's search tool retrieves: the preset's (empty).",
    )
    retriever = forms.ChoiceField(
        required=False, choices=literal_choices("env.retriever"), label="Retriever", help_text=RETRIEVER_HELP
    )
    data_benchmarks = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Benchmarks from your data",
        help_text="Their test split, beside the benchmarks named below (the Data page uploads them).",
    )
    benchmarks = forms.CharField(
        required=False,
        initial="builtin",
        max_length=4000,
        help_text="What every run is evaluated on, separated by commas (empty: builtin): builtin, or FlashRAG files "
        "in your team's data. With several, each gets a verdict, and so does their average (each weighted equally).",
    )
    questions = forms.IntegerField(
        min_value=0,
        initial=0,
        help_text="Questions of each benchmark's test split every run is evaluated on (0: all of them).",
    )
    overrides = OverridesField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text='Overrides every arm shares, as JSON: {"grpo.total_steps": 8}.',
    )

    def __init__(self, *args: Any, teams: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["team"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = teams
        if teams.count() == 1:
            field.widget = forms.HiddenInput()
        questions = data_choices(teams, "questions")
        trainable = data_choices(teams, "questions", split="train")  # every arm trains on the train split
        self.fields["dataset"].choices = [("", "(preset)"), ("builtin", "builtin"), *((q, q) for q in trainable)]  # type: ignore[attr-defined]
        corpora = ("builtin", *data_choices(teams, "corpus"))
        self.fields["corpus"].choices = [("", "(preset)"), *((c, c) for c in corpora)]  # type: ignore[attr-defined]
        self.fields["data_benchmarks"].choices = [(q, q) for q in questions]  # type: ignore[attr-defined]

    def clean_benchmarks(self) -> list[str]:
        names = [name.strip() for name in re.split(r"[,\n]", self.cleaned_data["benchmarks"]) if name.strip()]
        names += [name for name in self.cleaned_data.get("data_benchmarks") or [] if name not in names]
        if len(names) > MAX_BENCHMARKS:
            raise forms.ValidationError(f"name at most {MAX_BENCHMARKS} benchmarks")
        return names or ["builtin"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        arms, baseline = data.get("arms") or [], data.get("baseline")
        if arms and baseline and baseline not in arms:
            self.add_error("baseline", "check the baseline arm too")
        return data

    def spec(self) -> dict[str, Any]:
        """The experiment as the API takes it."""
        data = self.cleaned_data
        arms = [name for name, _ in ARM_CHOICES if name in data["arms"]]
        overrides = dict(data["overrides"] or {})
        for name, path in (("dataset", "env.dataset"), ("corpus", "env.corpus"), ("retriever", "env.retriever")):
            if data.get(name):
                overrides[path] = data[name]
        return {
            "preset": data["preset"],
            "overrides": overrides,
            "arms": arms,
            "seeds": data["seeds"],
            "baseline": data["baseline"],
            "evaluation": {
                "benchmarks": data["benchmarks"],
                "split": "test",
                "size": data["questions"],
                "sample_seed": 0,
            },
        }

    def apply_errors(self, error: InvalidInput) -> None:
        """The service's errors on the field they name (`overrides.grpo.lr` on overrides, `evaluation.benchmarks` on
        benchmarks), the rest on the form."""
        for path, messages in error.errors.items():
            head = path.split(".", 1)[0]
            field = ERROR_FIELDS.get(path) or (head if head in self.fields and head != "team" else None)
            for message in messages:
                self.add_error(field, f"{path}: {message}" if field != path else message)
