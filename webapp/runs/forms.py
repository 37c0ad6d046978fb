"""Forms of the run pages. The engine validates configs; these forms map its errors back onto their fields."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast, get_args, get_type_hints

from django import forms

from inspo_engine.config import MAX_INSTRUCTION_CHARS, TRACKERS, RunConfig, field_value
from webapp.accounts.models import Team
from webapp.core.errors import InvalidInput
from webapp.core.text import has_nul
from webapp.data.references import data_choices
from webapp.data.selectors import corpus_index_texts

from .configs import PRESET_NAMES, config_compose
from .heatmaps import DEFAULT_SAMPLE_SIZE, DEFAULT_TOP_K, MAX_CHECKPOINTS, MAX_SAMPLE_SIZE, spread
from .models import ControlRequest

# form field -> the config path it sets
CONFIG_FIELDS = {
    "seed": "seed",
    "mode": "mode",
    "total_steps": "grpo.total_steps",
    "group_size": "grpo.group_size",
    "batch_size": "grpo.batch_size",
    "lr": "grpo.lr",
    "population_size": "population.population_size",
    "proposer": "evolution.proposer",
    "evolve_every": "evolution.evolve_every",
    "evolve_until": "evolution.evolve_until",
    "backend": "backend.name",
    "model": "backend.model",
    "optimizer_provider": "optimizer.provider",
    "optimizer_model": "optimizer.model",
    "optimizer_endpoint": "optimizer.endpoint",
    "loss": "grpo.loss",
    "tracking": "tracking.backends",
    "dataset": "env.dataset",
    "corpus": "env.corpus",
    "retriever": "env.retriever",
    "benchmarks": "eval.benchmarks",
    "use_lora": "grpo.use_lora",
    "lora_rank": "grpo.lora_rank",
    "lora_alpha": "grpo.lora_alpha",
    "lora_dropout": "grpo.lora_dropout",
    "lora_targets": "grpo.lora_targets",
    "gradient_checkpointing": "grpo.gradient_checkpointing",
}
LORA_FIELDS = ("use_lora", "lora_rank", "lora_alpha", "lora_dropout", "lora_targets", "gradient_checkpointing")
"""The run form's "Adapters (LoRA) and memory" group."""
FIELD_FOR_PATH = {path: name for name, path in CONFIG_FIELDS.items()}


def preset_field_texts() -> dict[str, dict[str, str | None]]:
    """Per preset, its value of each field the run form sets, as the form shows it (None: not set). A field left
    empty keeps this value, so the form shows the chosen preset's."""
    texts: dict[str, dict[str, str | None]] = {}
    for name in PRESET_NAMES:
        config = config_compose(preset=name)
        texts[name] = {field: _display(field_value(config, path)) for field, path in CONFIG_FIELDS.items()}
        if config.optimizer.provider == "rules":  # the offline optimizer calls no model: show none
            texts[name]["optimizer_model"] = None
    return texts


def default_run_name(preset: str, now: datetime) -> str:
    """The name the New run form starts with: the preset and the minute, e.g. `quick-20250301-1412` (unique enough
    to tell a first few runs apart; the form's script follows a change of preset while the name is still this).

    >>> default_run_name("quick", datetime(2025, 3, 1, 14, 12, 59))
    'quick-20250301-1412'
    """
    return f"{preset}-{now:%Y%m%d-%H%M}"


def _display(value: Any) -> str | None:
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, list):
        return ", ".join(map(str, value))
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def team_tracking_text(teams: Any) -> str:
    """What the run form says of each team's default trackers, e.g. "Defaults: Alice's team: mlflow, tensorboard;
    Lab: no default." (a default that names no tracker reads "none")."""
    parts = []
    for team in teams:
        default = team.tracking_default
        named = (", ".join(default.get("backends") or []) or "none") if default else "no default"
        parts.append(f"{team.name}: {named}")
    return f"Defaults: {'; '.join(parts)}." if parts else ""


def _choices(*values: str) -> list[tuple[str, str]]:
    return [("", "(preset)")] + [(v, v) for v in values]


def literal_choices(path: str) -> list[tuple[str, str]]:
    """The choices of the config field at `path` (`grpo.loss`), whose type is a `Literal`: its values as the engine's
    dataclasses declare them, so a value the engine adds is offered without touching the form."""
    owner: Any = RunConfig
    *sections, leaf = path.split(".")
    for section in sections:
        owner = get_type_hints(owner)[section]
    return _choices(*get_args(get_type_hints(owner)[leaf]))


RETRIEVER_HELP = (
    "How the search tool finds passages in the corpus: bm25 (their words) or dense (embeddings); remote: your own "
    "Search-R1 server (env.retriever_url in Overrides)."
)


def retriever_states(teams: Any) -> dict[str, Any]:
    """What the forms' index line reads from: each preset's corpus and retriever, and per corpus offered and
    retriever, whether it has an index (`data.selectors.corpus_index_texts`). The forms' script
    (frontend/src/pages/indexStatus.ts) picks the line as the choices change."""
    presets = {name: (c.env.corpus, c.env.retriever) for name in PRESET_NAMES for c in [config_compose(preset=name)]}
    return {"presets": presets, "texts": corpus_index_texts(teams=teams)}


def retriever_status(states: dict[str, Any], *, preset: Any, corpus: Any, retriever: Any) -> str:
    """The index line for these choices: an empty corpus or retriever is the preset's.

    >>> states = {"presets": {"quick": ("builtin", "dense")}, "texts": {"data:wiki": {"bm25": "built"}}}
    >>> retriever_status(states, preset="quick", corpus="data:wiki", retriever="bm25")
    'built'
    >>> retriever_status(states, preset="quick", corpus="data:wiki", retriever="")  # the preset's dense: unknown
    ''
    """
    preset_corpus, preset_retriever = states["presets"].get(preset, ("builtin", "dense"))
    texts = states["texts"].get(corpus or preset_corpus) or {}
    return str(texts.get(retriever or preset_retriever, ""))


class OverridesField(forms.CharField):
    """A JSON object of `path: value` overrides, e.g. {"grpo.kl_coef": 0.002}."""

    def to_python(self, value: Any) -> dict[str, Any]:  # type: ignore[override]
        text = (super().to_python(value) or "").strip()
        if not text:
            return {}
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise forms.ValidationError(f"not valid JSON: {error}") from None
        if not isinstance(data, dict):
            raise forms.ValidationError('must be a JSON object such as {"grpo.kl_coef": 0.002}')
        if has_nul(data):
            raise forms.ValidationError("NUL characters are not allowed")
        return data


class NameField(forms.CharField):
    """A run's or an experiment's name, at most `max_length` characters. A longer one is refused with a message (as
    the API refuses it), not cut: the input carries no `maxlength`, with which a browser silently drops what is
    pasted past it."""

    def __init__(self, *, max_length: int = 200, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", f"At most {max_length} characters.")
        super().__init__(max_length=max_length, **kwargs)

    def widget_attrs(self, widget: forms.Widget) -> dict[str, Any]:
        attrs = super().widget_attrs(widget)
        attrs.pop("maxlength", None)
        return attrs


def _tags(text: str) -> list[str]:
    return [tag.strip() for tag in text.split(",") if tag.strip()]


class ConfigFormMixin(forms.Form):
    """Turns the engine's errors (dotted field paths) into errors on the matching form field."""

    def apply_config_errors(self, error: InvalidInput) -> None:
        """An error goes under the form field that set its path; a path the form field left empty came from the
        overrides (or the preset), so its error goes under Overrides."""
        for path, messages in error.errors.items():
            name = FIELD_FOR_PATH.get(path, path if error.key is None else None)
            if name in CONFIG_FIELDS and self.cleaned_data.get(name) in (None, ""):
                name = None
            for message in messages:
                if name and name in self.fields:
                    self.add_error(name, message)
                elif "overrides" in self.fields:
                    self.add_error("overrides", f"{path}: {message}")
                else:
                    self.add_error(None, f"{path}: {message}")


class RunForm(ConfigFormMixin):
    preset_notes: dict[str, str]
    """Per group of checkboxes, the chosen preset's value (`show_preset`)."""

    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    name = NameField()
    tags = forms.CharField(required=False, help_text="Comma-separated.")
    preset = forms.ChoiceField(choices=[(p, p) for p in PRESET_NAMES], initial="quick")
    seed = forms.IntegerField(required=False)
    mode = forms.ChoiceField(required=False, choices=literal_choices("mode"))
    total_steps = forms.IntegerField(required=False, label="Total steps (T)")
    group_size = forms.IntegerField(required=False, label="Group size (G)")
    batch_size = forms.IntegerField(required=False)
    lr = forms.FloatField(required=False, label="Learning rate")
    population_size = forms.IntegerField(required=False, label="Population size (N_P)")
    proposer = forms.ChoiceField(required=False, choices=literal_choices("evolution.proposer"))
    evolve_every = forms.IntegerField(required=False, label="Evolve every (K_e)")
    evolve_until = forms.IntegerField(required=False, label="Evolve until (T_e)")
    backend = forms.ChoiceField(required=False, choices=literal_choices("backend.name"))
    model = forms.CharField(required=False, label="Policy model")
    optimizer_provider = forms.ChoiceField(required=False, choices=literal_choices("optimizer.provider"))
    optimizer_model = forms.CharField(required=False)
    optimizer_endpoint = forms.CharField(
        required=False, max_length=64, help_text="A named optimizer endpoint of this server (its key stays here)."
    )
    loss = forms.ChoiceField(
        required=False,
        choices=literal_choices("grpo.loss"),
        label="GRPO loss",
        help_text="grpo (DeepSeekMath), dr_grpo (Dr. GRPO), dapo (DAPO: set clip_ratio_high in overrides), gspo.",
    )
    tracking = forms.MultipleChoiceField(
        required=False,
        choices=[(name, name) for name in TRACKERS],
        widget=forms.CheckboxSelectMultiple,
        label="Trackers",
        help_text="Also send the run to MLflow, W&B (offline without a key) or TensorBoard, in the run directory. "
        "None checked: the team's default trackers; checked ones replace the default whole (its project and MLflow "
        "server too: set those in Overrides).",
    )
    no_tracking = forms.BooleanField(
        required=False,
        label="No trackers",
        help_text="Not even the team's default.",
    )
    dataset = forms.ChoiceField(
        required=False, label="Training questions", help_text="builtin, your team's data or shared data (Data page)."
    )
    corpus = forms.ChoiceField(required=False, label="Corpus", help_text="The passages the search tool retrieves.")
    retriever = forms.ChoiceField(
        required=False, choices=literal_choices("env.retriever"), label="Retriever", help_text=RETRIEVER_HELP
    )
    benchmarks = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Evaluated on",
        help_text="None checked: the preset's, and the test split of your training data when it has one.",
    )
    use_lora = forms.TypedChoiceField(
        required=False,
        choices=[("", "(preset)"), ("true", "on: train adapters only"), ("false", "off: train every weight")],
        coerce=lambda value: value == "true",
        empty_value=None,
        label="LoRA",
        help_text="Adapters (peft) instead of every weight: a fraction of the memory and the update's work.",
    )
    lora_rank = forms.IntegerField(required=False, min_value=1, label="LoRA rank (r)")
    lora_alpha = forms.IntegerField(required=False, min_value=1, label="LoRA alpha", help_text="Empty: 2 × rank.")
    lora_dropout = forms.FloatField(required=False, min_value=0, label="LoRA dropout", help_text="torch backend only.")
    lora_targets = forms.CharField(
        required=False,
        label="LoRA targets",
        help_text="all-linear (every projection), or module names, comma-separated: q_proj, v_proj.",
    )
    gradient_checkpointing = forms.TypedChoiceField(
        required=False,
        choices=[
            ("", "(preset)"),
            ("true", "on: blocks run again in backward (less memory)"),
            ("false", "off: activations kept (faster update, more memory)"),
        ],
        coerce=lambda value: value == "true",
        empty_value=None,
        label="Gradient checkpointing",
        help_text="Off pays LoRA's saved memory for speed: see Benchmarks, LoRA against full fine-tuning.",
    )
    overrides = OverridesField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text='Any other field as JSON, e.g. {"grpo.kl_coef": 0.002, "env.max_turns": 3}.',
    )

    def clean_lora_targets(self) -> list[str] | None:
        return _tags(self.cleaned_data["lora_targets"]) or None

    def show_preset(self, texts: dict[str, str | None]) -> None:
        """Each config field shows the preset's value where it is, once: an empty input as its placeholder, a select
        in its keep-the-preset choice, a group of checkboxes in `preset_notes` (None: the preset sets nothing). The
        form's script (frontend/src/pages/newRun.ts) does the same when another preset is chosen."""
        self.preset_notes.clear()
        for name in CONFIG_FIELDS:
            field, value = self.fields[name], texts.get(name)
            if isinstance(field.widget, forms.CheckboxSelectMultiple):
                self.preset_notes[name] = value or "none"
            elif isinstance(field, forms.ChoiceField):
                choices = list(cast("Iterable[tuple[Any, Any]]", field.choices))
                choices[0] = ("", "(preset)" if value is None else f"(preset: {value})")
                field.choices = choices
            else:
                field.widget.attrs["placeholder"] = value or ""

    def __init__(self, *args: Any, teams: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.preset_notes = {}
        team_field = self.fields["team"]
        assert isinstance(team_field, forms.ModelChoiceField)
        team_field.queryset = teams
        self.fields["tracking"].help_text += " " + team_tracking_text(teams)
        questions, corpora = data_choices(teams, "questions"), data_choices(teams, "corpus")
        trainable = data_choices(teams, "questions", split="train")  # a run trains on the train split
        self.fields["dataset"].choices = _choices("builtin", *trainable)  # type: ignore[attr-defined]
        self.fields["corpus"].choices = _choices("builtin", *corpora)  # type: ignore[attr-defined]
        self.fields["benchmarks"].choices = [(v, v) for v in ("builtin", *questions)]  # type: ignore[attr-defined]

    def clean(self) -> dict[str, Any]:
        """Raw input for `run_submit`: `config_overrides` holds the JSON overrides with each filled-in field over
        them (at its config path); the service composes and validates, and `apply_config_errors` shows its errors.
        Trackers: the checked ones are the run's own; none checked leaves tracking unnamed, so the run gets its
        team's default, unless "No trackers" asks for none (`tracking.backends` set to [])."""
        data = super().clean() or {}
        overrides = dict(data.get("overrides") or {})
        for name, path in CONFIG_FIELDS.items():
            value = data.get(name)
            if value not in (None, "", []):
                overrides[path] = value
        if data.get("no_tracking"):
            if data.get("tracking"):
                self.add_error("no_tracking", "uncheck the trackers above, or this")
            overrides[CONFIG_FIELDS["tracking"]] = []
        data["config_overrides"] = overrides
        data["tag_list"] = _tags(data.get("tags", ""))
        return data


class TeamTrackingForm(forms.Form):
    """The team's default trackers (the page of `views.team_tracking`): a run config's tracking section, which the
    service checks as a run's. An empty text field is null."""

    backends = forms.MultipleChoiceField(
        required=False,
        choices=[(name, name) for name in TRACKERS],
        widget=forms.CheckboxSelectMultiple,
        label="Trackers",
        help_text="None checked: the team's runs send to no tracker unless they choose their own.",
    )
    project = forms.CharField(max_length=64, initial="inspo", help_text="The MLflow experiment and W&B project.")
    mlflow_uri = forms.CharField(
        required=False, max_length=2000, label="MLflow server", help_text="http(s)://…; empty: mlruns/ in the run."
    )
    wandb_secret = forms.CharField(required=False, max_length=64, label="W&B key", help_text="A team key's name.")
    mlflow_secret = forms.CharField(
        required=False, max_length=64, label="MLflow token", help_text="A team key's name; needs the server."
    )

    def section(self) -> dict[str, Any]:
        """The tracking section for `services.team_tracking_set`."""
        data = self.cleaned_data
        section = {"backends": data["backends"], "project": data["project"]}
        return section | {name: data[name] or None for name in ("mlflow_uri", "wandb_secret", "mlflow_secret")}

    def apply_errors(self, error: InvalidInput) -> None:
        """The service's errors (`tracking.<field>`) on the fields they name."""
        for path, messages in error.errors.items():
            name = path.removeprefix("tracking.")
            for message in messages:
                self.add_error(name if name in self.fields else None, message)


class CloneForm(ConfigFormMixin):
    name = NameField(required=False, help_text="At most 200 characters; empty: the source's name with (clone).")
    tags = forms.CharField(required=False, help_text="Comma-separated; empty keeps the source's tags.")
    overrides = OverridesField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "placeholder": '{"grpo.total_steps": 20}'}),
        help_text='Fields to change from the source\'s config, as JSON, e.g. {"grpo.total_steps": 20, "seed": 1}; '
        "empty keeps it as it was.",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        data["tag_list"] = _tags(data.get("tags", "")) or None
        return data


class ControlForm(forms.Form):
    """A control request from the run page: the inject form, or a pin / unpin / retire button of an instruction."""

    kind = forms.ChoiceField(choices=ControlRequest.Kind.choices, widget=forms.HiddenInput)
    text = forms.CharField(
        required=False,
        max_length=MAX_INSTRUCTION_CHARS,
        label="Instruction to inject",
        widget=forms.Textarea(attrs={"rows": 3}),
    )
    skip_verification = forms.BooleanField(
        required=False, label="Skip verification", help_text="It joins unscored instead of verified against I*."
    )
    instruction_id = forms.RegexField(r"^ins-[0-9]{4,9}$", required=False, widget=forms.HiddenInput)


class EvaluateForm(forms.Form):
    benchmarks = forms.CharField(initial="builtin", help_text="Comma-separated benchmark names or JSONL paths.")
    checkpoint = forms.IntegerField(required=False, help_text="Checkpoint id; empty: the newest.")
    limit = forms.IntegerField(required=False, min_value=1, help_text="Questions per benchmark; empty: all.")

    def clean_benchmarks(self) -> list[str]:
        return _tags(self.cleaned_data["benchmarks"])

    def apply_errors(self, error: InvalidInput) -> None:
        """The service's errors on the field they name (`benchmarks`, `checkpoint`), the rest on the form."""
        for field, messages in error.errors.items():
            for message in messages:
                self.add_error(field if field in self.fields else None, message)


class HeatmapForm(forms.Form):
    """An instruction × checkpoint heatmap from the run page: the instructions to score (checked: the heaviest
    few), the checkpoints (checked: all on disk, spread beyond the most a heatmap takes), the benchmark and sample.
    `instructions` are `heatmaps.heatmap_instruction_choices`; `steps` the checkpoint steps on disk."""

    instructions = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, label="Instructions (rows)")
    steps = forms.TypedMultipleChoiceField(
        coerce=int, widget=forms.CheckboxSelectMultiple, label="Checkpoints (columns)"
    )
    benchmark = forms.CharField(initial="builtin", max_length=1000, help_text="'builtin' or a JSONL path.")
    sample_size = forms.IntegerField(
        initial=DEFAULT_SAMPLE_SIZE,
        min_value=1,
        max_value=MAX_SAMPLE_SIZE,
        label="Questions",
        help_text="Of the test split, the same in every cell.",
    )
    sample_seed = forms.IntegerField(initial=0, min_value=0, max_value=2**31 - 1, label="Sample seed")

    def __init__(self, *args: Any, instructions: list[dict[str, Any]], steps: list[int], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        rows, columns = self.fields["instructions"], self.fields["steps"]
        assert isinstance(rows, forms.MultipleChoiceField) and isinstance(columns, forms.MultipleChoiceField)
        rows.choices = [(c["id"], _instruction_label(c)) for c in instructions]
        rows.initial = [c["id"] for c in instructions[:DEFAULT_TOP_K]]
        columns.choices = [(step, f"step {step}") for step in steps]
        columns.initial = spread(steps, MAX_CHECKPOINTS)


def _instruction_label(choice: dict[str, Any]) -> str:
    """`ins-0003 · weight 0.412 · living · Answer the question…`: what tells the instructions apart."""
    parts = [choice["id"], "weight —" if choice["weight"] is None else f"weight {choice['weight']:.3f}"]
    if choice["living"]:
        parts.append("living")
    elif choice["retired_step"] is not None:
        parts.append(f"pruned at step {choice['retired_step']}")
    text = " ".join(choice["text"].split())
    parts.append(text if len(text) <= 70 else text[:70] + "…")
    return " · ".join(parts)
