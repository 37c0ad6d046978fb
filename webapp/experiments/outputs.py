"""Output serializers of the experiments API: the shapes of what its views send, as the OpenAPI schema documents
them and frontend/src/types.ts declares them. The table and verdicts pass through as the engine's
`experiment_results` makes them."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from webapp.accounts.models import Team, User
from webapp.runs.models import Run

from .models import Experiment


class ExperimentRunOutputSerializer(serializers.ModelSerializer[Run]):
    class Meta:
        model = Run
        fields: tuple[str, ...] = ("id", "name", "arm", "seed", "status", "step", "total_steps", "error")
        read_only_fields = fields


class ExperimentOutputSerializer(serializers.ModelSerializer[Experiment]):
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    created_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    overrides = serializers.DictField(help_text="Overrides of the preset every arm shares.")
    arms = serializers.DictField(
        source="arm_overrides",
        child=serializers.DictField(),
        help_text="Arm name → its overrides (a built-in arm's included), in the experiment's order.",
    )
    seeds = serializers.ListField(child=serializers.IntegerField())
    evaluation = serializers.DictField(
        source="evaluation_spec",
        help_text="{benchmarks, split, size, sample_seed}: `benchmarks` a list, also for an experiment stored with "
        "one `benchmark`.",
    )
    run_count = serializers.IntegerField(help_text="Arms × seeds.")

    class Meta:
        model = Experiment
        fields: tuple[str, ...] = (
            "id",
            "team",
            "created_by",
            "name",
            "preset",
            "overrides",
            "arms",
            "seeds",
            "evaluation",
            "baseline",
            "status",
            "run_count",
            "created_at",
        )
        read_only_fields = fields


class SeedsNeededOutputSerializer(serializers.Serializer[Any]):
    difference = serializers.FloatField(help_text="The difference in EM (0–1) to detect.")
    seeds = serializers.IntegerField(allow_null=True, help_text="Seeds per arm it would need at this variance.")
    reason = serializers.CharField(allow_null=True, help_text="Why there is no count (null when there is one).")


class VerdictComparisonOutputSerializer(serializers.Serializer[Any]):
    mean = serializers.FloatField(help_text="Mean difference in EM (0–1) from the baseline arm.")
    low = serializers.FloatField()
    high = serializers.FloatField()
    level = serializers.FloatField()
    seeds = serializers.IntegerField()
    questions = serializers.IntegerField(help_text="The questions paired (over every benchmark, for the average).")
    benchmark_questions = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="For the average over several benchmarks: each one's questions (each benchmark weighs 1/B).",
    )
    per_seed = serializers.DictField(child=serializers.FloatField(), help_text="Seed → its paired difference.")
    method = serializers.CharField(help_text="How the interval was made.")
    excludes_zero = serializers.BooleanField()
    without_variance = serializers.BooleanField(
        help_text="Every paired difference was the same (both arms scored every question alike in every seed, say): "
        "the interval has no width because nothing varied, so it cannot be estimated."
    )
    seeds_needed = SeedsNeededOutputSerializer()


class RewardCurveOutputSerializer(serializers.Serializer[Any]):
    steps = serializers.ListField(child=serializers.IntegerField())
    mean = serializers.ListField(child=serializers.FloatField())
    low = serializers.ListField(child=serializers.FloatField())
    high = serializers.ListField(child=serializers.FloatField())
    seeds = serializers.ListField(child=serializers.IntegerField(), help_text="Seeds that reached each step.")


class BenchmarkResultOutputSerializer(serializers.Serializer[Any]):
    """One benchmark of an arm, over the seeds that finished it."""

    benchmark = serializers.CharField(help_text="As the experiment names it.")
    seeds = serializers.ListField(child=serializers.IntegerField(), help_text="The seeds that finished it.")
    mean_em = serializers.FloatField(allow_null=True)
    mean_f1 = serializers.FloatField(allow_null=True)
    per_seed_em = serializers.DictField(child=serializers.FloatField())
    questions = serializers.IntegerField()
    comparison = VerdictComparisonOutputSerializer(allow_null=True)
    verdict = serializers.CharField(allow_null=True, help_text="Its difference from the baseline arm, in words.")


class ArmResultOutputSerializer(serializers.Serializer[Any]):
    """An arm: with several benchmarks its numbers and verdict are those of their unweighted average (each
    benchmark's own are in `benchmarks`); with one, that benchmark's."""

    arm = serializers.CharField()
    overrides = serializers.DictField()
    seeds = serializers.ListField(
        child=serializers.IntegerField(), help_text="The seeds that finished every benchmark."
    )
    mean_em = serializers.FloatField(allow_null=True)
    mean_f1 = serializers.FloatField(allow_null=True)
    per_seed_em = serializers.DictField(child=serializers.FloatField())
    questions = serializers.IntegerField()
    reward_last = serializers.FloatField(allow_null=True, help_text="Training reward over the last steps.")
    reward_curve = RewardCurveOutputSerializer()
    comparison = VerdictComparisonOutputSerializer(allow_null=True)
    verdict = serializers.CharField(allow_null=True, help_text="The difference from the baseline arm, in words.")
    benchmarks = BenchmarkResultOutputSerializer(many=True, help_text="One per benchmark, in the experiment's order.")


class MissingRunOutputSerializer(serializers.Serializer[Any]):
    arm = serializers.CharField()
    seed = serializers.IntegerField()


class MachineGroupOutputSerializer(serializers.Serializer[Any]):
    """Runs that recorded computing on the same machine."""

    machine = serializers.DictField(
        child=serializers.CharField(), allow_null=True, help_text="cpu, cpu_flags, python, torch, threads, gpu."
    )
    described = serializers.CharField(help_text="The machine in words ('not recorded' for none).")
    runs = serializers.ListField(child=serializers.CharField(), help_text="Its runs, as `<arm>-s<seed>`.")


class ExperimentResultsOutputSerializer(serializers.Serializer[Any]):
    baseline = serializers.CharField()
    level = serializers.FloatField()
    benchmarks = serializers.ListField(child=serializers.CharField(), help_text="The benchmarks, in order.")
    arms = ArmResultOutputSerializer(many=True)
    missing = MissingRunOutputSerializer(many=True, help_text="(arm, seed) runs with no results (yet).")
    complete = serializers.BooleanField()
    machines = MachineGroupOutputSerializer(
        many=True, help_text="The runs that started, grouped by the machine each recorded computing on."
    )
    machines_warning = serializers.CharField(
        allow_null=True, help_text="Why runs on more than one machine weaken the pairing by seed; null for one."
    )


class ExperimentEstimateOutputSerializer(serializers.Serializer[Any]):
    """What an experiment would cost before it is started (`estimates.experiment_estimate`)."""

    runs = serializers.IntegerField(help_text="Arms × seeds.")
    minutes_per_run = serializers.FloatField(
        allow_null=True,
        help_text="Worker minutes one run is taken to last: the middle of the range (the median of the team's past "
        "runs scaled to these steps and questions, or the preset's stated figure).",
    )
    basis = serializers.ChoiceField(
        choices=("team", "preset", "none", "limit"),
        help_text="team: the team's finished runs of the preset, scaled; preset: the preset's stated figure (the team "
        "has none); none: no figure; limit: past a limit on seeds or runs, which `text` names.",
    )
    measured_runs = serializers.IntegerField(help_text="The team's finished runs behind a `team` estimate.")
    text = serializers.CharField(help_text="The estimate in words, as the New experiment form shows it.")
    minutes_low = serializers.FloatField(allow_null=True, help_text="The low end of one run's worker minutes.")
    minutes_high = serializers.FloatField(allow_null=True, help_text="The high end of one run's worker minutes.")
    worker_minutes = serializers.ListField(
        child=serializers.FloatField(), allow_null=True, help_text="[low, middle, high] worker minutes of all runs."
    )
    steps = serializers.IntegerField(allow_null=True, help_text="Steps of one run.")
    questions = serializers.IntegerField(
        allow_null=True, help_text="Evaluation questions one run answers over all its evaluations (null: not known)."
    )
    queue = serializers.ChoiceField(choices=("cpu", "gpu"), help_text="The Celery queue its runs go to.")
    queue_runs = serializers.IntegerField(help_text="Runs queued or running on that queue now, of every team.")
    queue_minutes = serializers.FloatField(help_text="The minutes those runs have left, summed.")
    slots = serializers.IntegerField(help_text="Runs the queue serves at once (those running now, at least one).")
    finish_minutes = serializers.ListField(
        child=serializers.FloatField(),
        allow_null=True,
        help_text="[low, middle, high] minutes from now until its last run ends: the queue ahead shared among the "
        "slots, then its runs as many at once as the slots and the team's active-run quota allow.",
    )
    method = serializers.CharField(help_text="How the range was made, in words.")
    at = serializers.CharField(help_text="When the estimate was made (ISO 8601).")


class RunDurationOutputSerializer(serializers.Serializer[Any]):
    id = serializers.CharField()
    arm = serializers.CharField()
    seed = serializers.IntegerField()
    status = serializers.CharField()
    worker_minutes = serializers.FloatField(allow_null=True, help_text="Start to finish.")
    wait_minutes = serializers.FloatField(allow_null=True, help_text="Submission to start (pending and queued).")
    total_minutes = serializers.FloatField(allow_null=True, help_text="Submission to finish.")


class EstimateErrorOutputSerializer(serializers.Serializer[Any]):
    estimated = serializers.FloatField(help_text="The middle of the estimate, minutes.")
    low = serializers.FloatField()
    high = serializers.FloatField()
    actual = serializers.FloatField()
    error_minutes = serializers.FloatField(help_text="Actual − estimated.")
    error_percent = serializers.FloatField(allow_null=True)
    within_range = serializers.BooleanField()


class ExperimentTimingOutputSerializer(serializers.Serializer[Any]):
    """`estimates.experiment_timing`: the time left while it runs; each run's durations and the estimate's error."""

    estimate = serializers.DictField(
        allow_null=True, help_text="The estimate made at submission (as `experiments/estimate/` answers it)."
    )
    runs = RunDurationOutputSerializer(many=True)
    worker_minutes = serializers.FloatField(allow_null=True, help_text="The runs' worker time, summed.")
    elapsed_minutes = serializers.FloatField(
        allow_null=True, help_text="Submission to the end of its last run (once it has ended)."
    )
    remaining_minutes = serializers.FloatField(allow_null=True, help_text="Time left (while it runs).")
    queue_runs = serializers.IntegerField(help_text="Others' runs ahead of its waiting ones on the queue.")
    worker_error = EstimateErrorOutputSerializer(allow_null=True)
    finish_error = EstimateErrorOutputSerializer(allow_null=True)
    text = serializers.CharField()


class ExperimentLeakageOutputSerializer(serializers.Serializer[Any]):
    """`leakage.leakage_rows`: one benchmark of an experiment."""

    benchmark = serializers.CharField()
    questions = serializers.IntegerField(help_text="The questions its finished runs were evaluated on.")
    leaked = serializers.IntegerField(help_text="Of those, the ones also in a run's training split.")
    excluded = serializers.BooleanField(help_text="Whether the table and verdicts leave them out.")
    text = serializers.CharField(help_text="What the verdicts are computed on, in words.")


class ExperimentDetailOutputSerializer(serializers.Serializer[Any]):
    experiment = ExperimentOutputSerializer()
    state = serializers.ChoiceField(
        choices=("running", "finished", "cancelled"), help_text="running while any run has not ended."
    )
    runs = ExperimentRunOutputSerializer(many=True)
    counts = serializers.DictField(child=serializers.IntegerField(), help_text="Runs per status.")
    results = ExperimentResultsOutputSerializer()
    leakage = ExperimentLeakageOutputSerializer(
        many=True, help_text="Per benchmark: its evaluated questions also in a run's training split."
    )
    exclude_overlap = serializers.BooleanField(help_text="Whether the table and verdicts leave those questions out.")
    timing = ExperimentTimingOutputSerializer()
