"""Output serializers of the runs API: the shapes of what its views send, as the OpenAPI schema documents them and
frontend/src/types.ts declares them (a test holds the two to the same fields). The dict-shaped answers of the
selectors pass through these on their way out; the population history's columns are the one exception (see
`PopulationOutputSerializer`)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inspo_engine.config import TRACKERS
from webapp.accounts.models import Team, User

from .configs import PRESET_NAMES
from .models import Checkpoint, ControlRequest, EvaluationRequest, Heatmap, Run
from .progress import run_progress
from .selectors import (
    BENCHMARK_METRICS,
    COMPARE_SERIES,
    OUTCOME_SERIES,
    SERIES_FIELDS,
    run_preset_diff,
    run_settled,
)

ConfigOutput = serializers.DictField
"""A whole engine config (inspo_engine.config.RunConfig.to_dict()): sections of fields."""


def _column(child: serializers.Field[Any, Any, Any, Any], help_text: str) -> serializers.ListField:
    return serializers.ListField(child=child, help_text=help_text)


# -- runs ----------------------------------------------------------------------------------------------------------


class RunOutputSerializer(serializers.ModelSerializer[Run]):
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    creator: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    tags = serializers.SerializerMethodField()
    progress = serializers.FloatField()
    queue = serializers.CharField()
    config = ConfigOutput()
    best_instruction_id = serializers.SerializerMethodField()
    cloned_from: serializers.PrimaryKeyRelatedField[Run] = serializers.PrimaryKeyRelatedField(
        read_only=True, allow_null=True
    )

    class Meta:
        model = Run
        fields: tuple[str, ...] = (
            "id",
            "team",
            "creator",
            "name",
            "tags",
            "status",
            "backend",
            "queue",
            "preset",
            "seed",
            "config",
            "created_at",
            "started_at",
            "finished_at",
            "heartbeat_at",
            "step",
            "total_steps",
            "progress",
            "error",
            "attempts",
            "best_instruction_id",
            "cloned_from",
        )
        read_only_fields = fields

    def get_tags(self, run: Run) -> list[str]:
        return sorted(tag.name for tag in run.tags.all())

    def get_best_instruction_id(self, run: Run) -> str | None:
        return run.best_instruction.key if run.best_instruction else None


class ConfigDiffOutputSerializer(serializers.Serializer[Any]):
    field = serializers.CharField(help_text="A dotted config field, e.g. `grpo.lr`.")
    values = serializers.DictField(
        child=serializers.JSONField(allow_null=True),
        help_text="Its value in each config, by the config's label (a run's id; `preset` and `run`); null where a "
        "config lacks the field.",
    )


class EvaluationInProgressOutputSerializer(serializers.Serializer[Any]):
    step = serializers.IntegerField(help_text="The step evaluated (0: the untrained policy).")
    done = serializers.IntegerField(help_text="Questions answered so far, over every benchmark.")
    total = serializers.IntegerField()


class RunActivityOutputSerializer(serializers.Serializer[Any]):
    """`progress.run_progress`: the phase, the share of the work done and the time left, evaluations included."""

    phase = serializers.ChoiceField(choices=("waiting", "evaluating", "training", "ended"))
    text = serializers.CharField(
        help_text="The phase in words: 'evaluating the untrained policy: 23 / 64 questions', 'training step 3 / 12'."
    )
    fraction = serializers.FloatField(
        help_text="The share of the work done, 0–1: steps and evaluation questions weighed by their measured "
        "durations (each step and each evaluation counted as one until both are measured)."
    )
    eta_seconds = serializers.FloatField(
        allow_null=True,
        help_text="Seconds left: the remaining steps at the mean of the steps so far, plus the remaining evaluations' "
        "questions at the rate evaluated so far; null while a rate it needs is unknown.",
    )
    step_seconds = serializers.FloatField(allow_null=True)
    question_seconds = serializers.FloatField(allow_null=True)
    remaining_steps = serializers.IntegerField()
    remaining_questions = serializers.IntegerField(allow_null=True)
    evaluation = EvaluationInProgressOutputSerializer(allow_null=True)


class RunDetailOutputSerializer(RunOutputSerializer):
    preset_diff = serializers.SerializerMethodField(
        help_text="The fields whose value differs from the run's preset, labelled `preset` and `run`; null when the "
        "run names no known preset."
    )
    activity = serializers.SerializerMethodField(
        help_text="Where the run stands, evaluations included (`progress` counts steps only)."
    )

    class Meta(RunOutputSerializer.Meta):
        fields = (*RunOutputSerializer.Meta.fields, "preset_diff", "activity")
        read_only_fields = fields

    # Both read the whole config (and the activity every step's timings): a settled run's are kept in the cache.

    @extend_schema_field(RunActivityOutputSerializer)
    def get_activity(self, run: Run) -> Any:
        evaluations = hashlib.blake2b(json.dumps(run.evaluation_progress, sort_keys=True).encode()).hexdigest()
        return run_settled(
            run=run,
            name=f"activity:{evaluations[:16]}",
            build=lambda: dict(RunActivityOutputSerializer(run_progress(run)).data),
        )

    @extend_schema_field(ConfigDiffOutputSerializer(many=True, allow_null=True))
    def get_preset_diff(self, run: Run) -> Any:
        def build() -> Any:
            diff = run_preset_diff(run=run)
            return None if diff is None else ConfigDiffOutputSerializer(diff, many=True).data

        return run_settled(run=run, name="preset-diff", build=build)


class EvaluationRequestOutputSerializer(serializers.ModelSerializer[EvaluationRequest]):
    checkpoint_step = serializers.IntegerField(source="checkpoint.step")

    class Meta:
        model = EvaluationRequest
        fields = ("id", "checkpoint", "checkpoint_step", "benchmarks", "limit", "status", "error", "created_at")
        read_only_fields = fields


class ControlRequestOutputSerializer(serializers.Serializer[Any]):
    """`selectors.control_request_row`: a request to steer the run's population and what became of it."""

    id = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=ControlRequest.Kind.choices)
    text = serializers.CharField(allow_null=True, help_text="inject: the instruction.")
    verify = serializers.BooleanField(allow_null=True, help_text="inject: verified against I* (false: joins unscored).")
    instruction_id = serializers.CharField(
        allow_null=True, help_text="The instruction it names (pin, unpin, retire) or added (an applied inject)."
    )
    author = serializers.CharField(help_text="Who asked.")
    created_at = serializers.DateTimeField()
    status = serializers.ChoiceField(choices=ControlRequest.Status.choices)
    outcome = serializers.CharField(help_text="What the engine did with it, or why it refused (empty while pending).")
    applied_at_step = serializers.IntegerField(
        allow_null=True, help_text="The step it was handled before; a pending one keeps it when it will be replayed."
    )


class CheckpointOutputSerializer(serializers.ModelSerializer[Checkpoint]):
    """`archive_bytes` and `sha256` are those of the archive the download sends (the policy and the loop's state);
    `optimizer_archive_bytes` and `optimizer_sha256` of the one `?optimizer=1` sends, while `optimizer_available`;
    `merged_archive_bytes` and `merged_sha256` of the one `?policy=merged` sends (a LoRA run's last checkpoint;
    blank otherwise)."""

    class Meta:
        model = Checkpoint
        fields = (
            "id",
            "step",
            "bytes",
            "archive_bytes",
            "sha256",
            "files",
            "available",
            "layout",
            "optimizer_bytes",
            "optimizer_archive_bytes",
            "optimizer_sha256",
            "optimizer_available",
            "merged_archive_bytes",
            "merged_sha256",
            "disk_bytes",
            "created_at",
        )
        read_only_fields = fields


# -- population diversity ------------------------------------------------------------------------------------------


class DiversitySeriesOutputSerializer(serializers.Serializer[Any]):
    """One array per measure, one value per population record (several records may share a step)."""

    step = _column(serializers.IntegerField(), "The step of each record.")
    reason = _column(serializers.CharField(), "initialised, step, pruned, evolved, …")
    size = _column(serializers.IntegerField(), "Living instructions.")
    cosine_mean = _column(serializers.FloatField(allow_null=True), "Mean pairwise cosine of the embeddings.")
    cosine_min = _column(serializers.FloatField(allow_null=True), "The least alike pair.")
    cosine_max = _column(serializers.FloatField(allow_null=True), "The most alike pair.")
    jaccard_mean = _column(serializers.FloatField(allow_null=True), "Mean pairwise Jaccard overlap of word sets.")
    strategies = _column(serializers.IntegerField(), "Groups of instructions at least strategy_cosine alike.")
    entropy = _column(serializers.FloatField(), "Shannon entropy (nats) of the sampling distribution.")
    entropy_normalised = _column(serializers.FloatField(allow_null=True), "The entropy divided by ln N.")


class DiversitySettingsOutputSerializer(serializers.Serializer[Any]):
    diversity = serializers.BooleanField(help_text="Whether the run measures diversity at all.")
    strategy_cosine = serializers.FloatField()
    collapse_cosine = serializers.FloatField()
    collapse_entropy = serializers.FloatField()
    collapse_steps = serializers.IntegerField()


class AlarmOutputSerializer(serializers.Serializer[Any]):
    """`selectors.alarm_row`: a collapse of the population."""

    id = serializers.IntegerField()
    step = serializers.IntegerField(help_text="The step the alarm tripped at.")
    since_step = serializers.IntegerField(help_text="The first of the consecutive collapsed steps.")
    reasons = serializers.ListField(
        child=serializers.ChoiceField(choices=["cosine", "entropy"]),
        help_text="cosine: every pair at least collapse_cosine alike; entropy: sampling entropy at most "
        "collapse_entropy of its maximum.",
    )
    cosine_min = serializers.FloatField(allow_null=True)
    entropy_normalised = serializers.FloatField(allow_null=True)
    collapse_cosine = serializers.FloatField()
    collapse_entropy = serializers.FloatField()
    cleared_step = serializers.IntegerField(allow_null=True, help_text="When it recovered (null: still collapsed).")
    active = serializers.BooleanField()
    acknowledged_by = serializers.CharField(allow_null=True)
    acknowledged_at = serializers.DateTimeField(allow_null=True)
    time = serializers.DateTimeField()


class DiversityOutputSerializer(serializers.Serializer[Any]):
    series = DiversitySeriesOutputSerializer()
    settings = DiversitySettingsOutputSerializer()
    alarms = AlarmOutputSerializer(many=True)
    collapsed = AlarmOutputSerializer(allow_null=True, help_text="The active alarm (null: not collapsed).")


class RunSummaryOutputSerializer(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    name = serializers.CharField()
    status = serializers.ChoiceField(choices=Run.Status.choices)
    step = serializers.IntegerField()


# -- a run's data for charts ------------------------------------------------------------------------------------


class MetricSeriesOutputSerializer(serializers.Serializer[Any]):
    """`selectors.run_metric_series`: one array per metric, one value per stored step."""

    step = _column(serializers.IntegerField(), "The stored steps, ascending.")
    phase = _column(serializers.CharField(), "The phase of each step: train or optimise.")
    timings = serializers.DictField(
        child=serializers.ListField(child=serializers.FloatField(allow_null=True)),
        help_text="Seconds per stage of each step, by stage; null where a step has no such stage.",
    )

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        for name in SERIES_FIELDS:
            fields[name] = _column(serializers.FloatField(allow_null=True), "Its value at each step; null: none.")
        for name in OUTCOME_SERIES:
            fields[name] = _column(
                serializers.FloatField(allow_null=True),
                "Its value at each step (em: share of exact-match answers; well_formed: share of well-formed replies; "
                "reward_format, reward_correct: the mean reward's format and correctness parts); null at steps "
                "recorded before it was kept.",
            )
        return fields


class PopulationOutputSerializer(serializers.Serializer[Any]):
    """The population history column-wise (`selectors.run_population_columns`): the snapshots' fields as arrays,
    and per instruction its statistics as arrays over the snapshots it spans. It documents the answer in the schema;
    the view sends the selector's columns as they are, because passing thousands of numbers through a field each
    costs more than reading them (tests check that this serializer reproduces them unchanged)."""

    class Snapshots(serializers.Serializer[Any]):
        step = _column(serializers.IntegerField(), "The step of each snapshot, ascending.")
        reason = _column(serializers.CharField(), "Why it was taken: initialised, step, pruned, evolved, …")
        best_id = _column(serializers.CharField(allow_null=True), "The best instruction at that snapshot.")
        time = _column(serializers.DateTimeField(), "When it was taken.")

    class InstructionColumns(serializers.Serializer[Any]):
        id = serializers.CharField()
        start = serializers.IntegerField(
            help_text="Index of the first snapshot it is a member of: element i of each array below belongs to "
            "snapshot start + i. The arrays end at its last membership."
        )
        weight = _column(serializers.FloatField(allow_null=True), "Its weight; null where it was not a member.")
        probability = _column(serializers.FloatField(allow_null=True), "Its sampling probability.")
        samples = _column(serializers.IntegerField(allow_null=True), "Questions it was sampled for in that step.")
        mean_reward = _column(serializers.FloatField(allow_null=True), "Their mean reward.")
        recent_reward = _column(
            serializers.FloatField(allow_null=True),
            "The mean of its per-step mean rewards over the steps its weight counts; null in runs recorded before.",
        )
        recent_low = _column(serializers.FloatField(allow_null=True), "Its 95 % interval's lower end.")
        recent_high = _column(serializers.FloatField(allow_null=True), "Its 95 % interval's upper end.")
        recent_samples = _column(serializers.IntegerField(allow_null=True), "The questions behind it.")

    snapshots = Snapshots()
    instructions = InstructionColumns(many=True, help_text="In order of first membership.")


class LineageNodeOutputSerializer(serializers.Serializer[Any]):
    id = serializers.CharField(help_text="The engine's id, e.g. ins-0003.")
    text = serializers.CharField()
    origin = serializers.CharField(help_text="seed, paraphrase, reflection, history, human, …")
    author = serializers.CharField(allow_null=True, help_text="Who wrote it: a human instruction's author.")
    pinned = serializers.BooleanField(help_text="Pinned by a person: pruning never drops it.")
    parent_id = serializers.CharField(allow_null=True)
    birth_step = serializers.IntegerField()
    verify_score = serializers.FloatField(allow_null=True)
    round_id = serializers.CharField(allow_null=True, help_text="The optimizer round that proposed it.")
    critique = serializers.CharField(allow_null=True, help_text="That round's critique.")
    retired_step = serializers.IntegerField(allow_null=True, help_text="When it was pruned; null while alive.")
    retired_reason = serializers.CharField(allow_null=True)


class FailureOutputSerializer(serializers.Serializer[Any]):
    """A failed trajectory the optimizer was shown."""

    question = serializers.CharField(required=False)
    response = serializers.CharField(required=False)
    golden_answers = serializers.ListField(child=serializers.CharField(), required=False)
    reward = serializers.FloatField(required=False)


class CandidateOutputSerializer(serializers.Serializer[Any]):
    text = serializers.CharField()
    valid = serializers.BooleanField()
    score = serializers.FloatField(allow_null=True)
    accepted = serializers.BooleanField()
    reason = serializers.CharField(allow_null=True)
    instruction_id = serializers.CharField(allow_null=True, help_text="The instruction it became, if accepted.")


class RoundOutputSerializer(serializers.Serializer[Any]):
    id = serializers.CharField()
    step = serializers.IntegerField()
    round = serializers.IntegerField()
    proposer = serializers.CharField()
    parent_id = serializers.CharField(allow_null=True)
    critique = serializers.CharField(allow_blank=True)
    failures = FailureOutputSerializer(many=True)
    optimizer_model = serializers.CharField(allow_blank=True)
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cost_usd = serializers.FloatField(allow_null=True, help_text="At INSPO_OPTIMIZER_PRICES; null: no price.")
    parent_score = serializers.FloatField(allow_null=True)
    n_questions = serializers.IntegerField(allow_null=True)
    candidates = CandidateOutputSerializer(many=True)


class EdgeOutputSerializer(serializers.Serializer[Any]):
    # The metaclass takes declared fields off the class, so this one may share its name with Field.source.
    source = serializers.CharField(help_text="The parent's id.")  # type: ignore[assignment]
    target = serializers.CharField(help_text="The child's id.")


class LineageOutputSerializer(serializers.Serializer[Any]):
    """`selectors.run_lineage`."""

    nodes = LineageNodeOutputSerializer(many=True)
    edges = EdgeOutputSerializer(many=True)
    rounds = RoundOutputSerializer(many=True)


class EvaluationResultOutputSerializer(serializers.Serializer[Any]):
    step = serializers.IntegerField()
    benchmark = serializers.CharField()
    metric = serializers.CharField()
    value = serializers.FloatField()
    n = serializers.IntegerField()
    instruction_id = serializers.CharField(allow_null=True)
    checkpoint_step = serializers.IntegerField(allow_null=True)
    source = serializers.ChoiceField(choices=["training", "requested"])  # type: ignore[assignment]  # as Edge's


class EvaluationsOutputSerializer(serializers.Serializer[Any]):
    """`selectors.run_evaluations`."""

    results = EvaluationResultOutputSerializer(many=True)
    table = serializers.DictField(
        child=serializers.DictField(child=serializers.FloatField()),
        help_text="The newest value per benchmark and metric: {benchmark: {metric: value}}.",
    )


class TableCellOutputSerializer(serializers.Serializer[Any]):
    """One benchmark of a run's Table 1: the evaluation its numbers come from."""

    benchmark = serializers.CharField()
    step = serializers.IntegerField(help_text="The step of the evaluation.")
    em = serializers.FloatField(allow_null=True, help_text="Exact match, 0–1.")
    f1 = serializers.FloatField(allow_null=True, help_text="Token F1, 0–1; null when the evaluation stored none.")
    n = serializers.IntegerField(help_text="Its questions.")
    per_question = serializers.BooleanField(help_text="Computed from its per-question results (else as stored).")
    source = serializers.ChoiceField(choices=["training", "requested"])  # type: ignore[assignment]  # as Edge's
    excluded = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="With exclude_overlap: its questions also in training that were left out (null: it kept no "
        "per-question results, so none could be).",
    )


class TableAverageOutputSerializer(serializers.Serializer[Any]):
    em = serializers.FloatField(allow_null=True)
    f1 = serializers.FloatField(allow_null=True)


class RunTableOutputSerializer(serializers.Serializer[Any]):
    """`selectors.run_benchmark_table`."""

    step = serializers.IntegerField(
        allow_null=True, help_text="The step asked for; null: each benchmark's newest evaluation (the final one)."
    )
    steps = serializers.ListField(child=serializers.IntegerField(), help_text="The steps that have evaluations.")
    benchmarks = TableCellOutputSerializer(many=True, help_text="One per benchmark, by name.")
    average = TableAverageOutputSerializer(
        help_text="Avg.: the unweighted mean over the benchmarks of each metric (null when a benchmark lacks it)."
    )


class TrajectoryOutputSerializer(serializers.Serializer[Any]):
    instruction_id = serializers.CharField(allow_null=True)
    question = serializers.CharField(allow_blank=True)
    golden_answers = serializers.ListField(child=serializers.CharField(allow_blank=True))
    response = serializers.CharField(allow_blank=True)
    answer = serializers.CharField(allow_null=True, allow_blank=True)
    reward = serializers.FloatField()
    correct = serializers.BooleanField(
        help_text="Whether the answer is an exact match of a gold answer: a reward above 0 may be format credit only."
    )
    tool_calls = serializers.IntegerField()
    response_tokens = serializers.IntegerField()
    error = serializers.CharField(allow_null=True)


class TrajectoryPageOutputSerializer(serializers.Serializer[Any]):
    """`selectors.run_trajectories`."""

    step = serializers.IntegerField(allow_null=True, help_text="null: the run has no trajectories yet.")
    trajectories = TrajectoryOutputSerializer(many=True)


# -- downloads ---------------------------------------------------------------------------------------------------


class BestInstructionDetailOutputSerializer(serializers.Serializer[Any]):
    id = serializers.CharField()
    text = serializers.CharField()
    origin = serializers.CharField()
    birth_step = serializers.IntegerField()
    weight = serializers.FloatField(allow_null=True)
    verify_score = serializers.FloatField(allow_null=True)
    lineage = LineageNodeOutputSerializer(many=True, help_text="It, its parent, … back to the seed.")


class BestInstructionOutputSerializer(serializers.Serializer[Any]):
    run = RunSummaryOutputSerializer()
    instruction = BestInstructionDetailOutputSerializer()
    config = ConfigOutput()


class MemberOutputSerializer(serializers.Serializer[Any]):
    id = serializers.CharField()
    weight = serializers.FloatField()
    probability = serializers.FloatField()
    samples = serializers.IntegerField()
    mean_reward = serializers.FloatField(allow_null=True)


class SnapshotOutputSerializer(serializers.Serializer[Any]):
    step = serializers.IntegerField()
    reason = serializers.CharField()
    best_id = serializers.CharField(allow_null=True)
    time = serializers.DateTimeField()
    members = MemberOutputSerializer(many=True)


class ExportOutputSerializer(serializers.Serializer[Any]):
    """`services.instruction_export`: the whole population with lineage, critiques and weights, row-wise."""

    run = RunSummaryOutputSerializer()
    config = ConfigOutput()
    best_instruction_id = serializers.CharField(allow_null=True)
    instructions = LineageNodeOutputSerializer(many=True)
    edges = EdgeOutputSerializer(many=True)
    rounds = RoundOutputSerializer(many=True)
    population_history = SnapshotOutputSerializer(many=True)


# -- comparing runs ----------------------------------------------------------------------------------------------


class CompareRunOutputSerializer(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    name = serializers.CharField()
    status = serializers.ChoiceField(choices=Run.Status.choices)
    preset = serializers.CharField(allow_blank=True)
    backend = serializers.CharField()
    step = serializers.IntegerField()
    total_steps = serializers.IntegerField()
    tags = serializers.ListField(child=serializers.CharField())


class CompareSeriesOutputSerializer(serializers.Serializer[Any]):
    """Fig. 2's series of one run, one value per stored step."""

    step = _column(serializers.IntegerField(), "The stored steps, ascending.")

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        for name in COMPARE_SERIES:
            fields[name] = _column(serializers.FloatField(allow_null=True), "Its value at each step.")
        return fields


class BenchmarkRowOutputSerializer(serializers.Serializer[Any]):
    run_id = serializers.UUIDField()
    values = serializers.DictField(
        child=serializers.FloatField(),
        help_text="Per benchmark, the newest evaluation's value (from its per-question results when it kept them).",
    )
    average = serializers.FloatField(
        allow_null=True,
        help_text="Avg.: the unweighted mean over the table's columns; null unless the run has a value in each.",
    )
    steps = serializers.DictField(child=serializers.IntegerField(), help_text="Per benchmark, the step of its value.")
    n = serializers.DictField(child=serializers.IntegerField(), help_text="Per benchmark, the questions of its value.")


class BenchmarkTableOutputSerializer(serializers.Serializer[Any]):
    metric = serializers.ChoiceField(choices=BENCHMARK_METRICS)
    columns = serializers.ListField(child=serializers.CharField(), help_text="Every benchmark any run has.")
    rows = BenchmarkRowOutputSerializer(many=True, help_text="One per run, in the order asked.")
    best = serializers.DictField(
        child=serializers.ListField(child=serializers.UUIDField()),
        help_text="Per column (and `average`) the runs tied for its highest value; a column where no run is ahead "
        "of another is left out.",
    )
    questions = serializers.DictField(
        child=serializers.ChoiceField(choices=["same", "different", "unrecorded"]),
        help_text="Per column, whether its runs were scored on the same questions: same; different (the ids of "
        "their questions differ, or their numbers do); unrecorded (as many questions each, but not every evaluation "
        "kept which).",
    )


class ComparisonOutputSerializer(serializers.Serializer[Any]):
    """`selectors.run_compare`."""

    runs = CompareRunOutputSerializer(many=True)
    series = serializers.DictField(child=CompareSeriesOutputSerializer(), help_text="By run id.")
    benchmarks = BenchmarkTableOutputSerializer()
    config_diff = ConfigDiffOutputSerializer(many=True, help_text="The fields that differ, labelled by run id.")
    baseline = serializers.UUIDField(allow_null=True)
    deltas = serializers.DictField(
        child=serializers.DictField(child=serializers.FloatField()),
        help_text="Per other run, its value minus the baseline's per column both have, on the questions both scored "
        "(their means over the questions they share where the two were scored on different ones; none where they "
        "share none, or where either kept no per-question results and their numbers of questions differ), and the "
        "average's: the mean of the columns' deltas, when every column has one.",
    )
    delta_questions = serializers.DictField(
        child=serializers.DictField(child=serializers.IntegerField(allow_null=True)),
        help_text="Per other run and column, the questions its delta is over: those both scored; null where either "
        "evaluation kept no per-question results (as many questions each, which ones unrecorded).",
    )


class PresetsOutputSerializer(serializers.Serializer[Any]):
    """Every preset's whole config, by preset name."""

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        return {name: ConfigOutput() for name in PRESET_NAMES}


# -- a team's default trackers ------------------------------------------------------------------------------------


class TrackingSectionSerializer(serializers.Serializer[Any]):
    """A run config's tracking section (inspo_engine.config.TrackingConfig, docs/tracking.md). Every field may be
    left out: it takes the engine's default."""

    backends = serializers.ListField(
        child=serializers.ChoiceField(choices=TRACKERS), required=False, help_text="Default none."
    )
    project = serializers.CharField(required=False, help_text="The MLflow experiment and W&B project; default inspo.")
    mlflow_uri = serializers.CharField(
        required=False, allow_null=True, help_text="An http(s) MLflow server on the allow-list; null: mlruns/."
    )
    wandb_secret = serializers.CharField(
        required=False, allow_null=True, help_text="The name of the team's stored W&B key."
    )
    mlflow_secret = serializers.CharField(
        required=False, allow_null=True, help_text="The name of the team's stored MLflow token; needs mlflow_uri."
    )


class TeamTrackingOutputSerializer(serializers.Serializer[Any]):
    tracking = TrackingSectionSerializer(
        allow_null=True, help_text="The tracking section of the team's runs that name no trackers; null: none."
    )


# -- instruction × checkpoint heatmaps -----------------------------------------------------------------------------


class HeatmapRowOutputSerializer(serializers.Serializer[Any]):
    """An instruction of the heatmap (a row)."""

    id = serializers.CharField()
    text = serializers.CharField()
    origin = serializers.CharField()
    retired_step = serializers.IntegerField(allow_null=True, help_text="When it was pruned; null while it lives.")


class HeatmapColumnOutputSerializer(serializers.Serializer[Any]):
    """A checkpoint of the heatmap (a column)."""

    step = serializers.IntegerField()
    checkpoint_id = serializers.IntegerField()


class HeatmapCellOutputSerializer(serializers.Serializer[Any]):
    """One instruction with one checkpoint's policy on the heatmap's questions; the scores are null until done."""

    id = serializers.IntegerField()
    row = serializers.IntegerField(help_text="Index into `rows`.")
    column = serializers.IntegerField(help_text="Index into `columns`.")
    instruction_id = serializers.CharField()
    step = serializers.IntegerField()
    em = serializers.FloatField(allow_null=True)
    f1 = serializers.FloatField(allow_null=True)
    answered = serializers.FloatField(allow_null=True, help_text="Share of answers that ended in <answer>.")
    n = serializers.IntegerField(help_text="Questions answered.")
    done = serializers.BooleanField()


class HeatmapOutputSerializer(serializers.Serializer[Any]):
    """`heatmaps.heatmap_grid`: an instruction × checkpoint heatmap, its progress and its cells."""

    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=Heatmap.Status.choices)
    benchmark = serializers.CharField()
    sample_size = serializers.IntegerField()
    sample_seed = serializers.IntegerField()
    questions = serializers.IntegerField(allow_null=True, help_text="Questions drawn; null until the worker starts.")
    answers = serializers.IntegerField(help_text="Its cost: cells × questions.")
    cells_total = serializers.IntegerField()
    cells_done = serializers.IntegerField()
    requested_by = serializers.CharField(allow_null=True)
    error = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    rows = HeatmapRowOutputSerializer(many=True, help_text="Instructions, in the order asked.")
    columns = HeatmapColumnOutputSerializer(many=True, help_text="Checkpoints, by step.")
    cells = HeatmapCellOutputSerializer(many=True, help_text="Row by row.")
    best = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="Per checkpoint step, the instructions tied for the best EM where some other one scored less.",
    )


class HeatmapPreviewOutputSerializer(serializers.Serializer[Any]):
    """What a heatmap request would evaluate and cost (`dry_run`); nothing is queued."""

    dry_run = serializers.BooleanField()
    instructions = serializers.ListField(child=serializers.CharField(), help_text="Rows, in order.")
    steps = serializers.ListField(child=serializers.IntegerField(), help_text="Columns: checkpoint steps.")
    benchmark = serializers.CharField()
    sample_size = serializers.IntegerField()
    cells = serializers.IntegerField()
    questions = serializers.IntegerField(help_text="Per cell, at most (all of the test split when it is smaller).")
    answers = serializers.IntegerField(help_text="cells × questions: the greedy answers the worker produces.")
    max_answers = serializers.IntegerField(help_text="The most a heatmap may cost (INSPO_HEATMAP_MAX_ANSWERS).")


class HeatmapAnswerOutputSerializer(TrajectoryOutputSerializer):
    """One greedy answer of a cell, with its own exact match and F1."""

    question_id = serializers.CharField()
    em = serializers.FloatField()
    f1 = serializers.FloatField()


class HeatmapCellDetailOutputSerializer(HeatmapCellOutputSerializer):
    """`heatmaps.heatmap_cell`: a cell and every answer it gave."""

    instruction_text = serializers.CharField()
    trajectories = HeatmapAnswerOutputSerializer(many=True)
