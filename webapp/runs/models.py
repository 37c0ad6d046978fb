"""What a run is and everything it produces: instructions and lineage, population snapshots, evolution rounds,
step metrics, sampled trajectories, evaluations and checkpoints. Model methods only compute from one row.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from webapp.accounts.models import Team


class Run(models.Model):
    """One INSPO training run of a team, with its validated engine config."""

    class Status(models.TextChoices):
        PENDING = "pending"
        QUEUED = "queued"
        RUNNING = "running"
        CANCELLING = "cancelling"
        FINISHED = "finished"
        CANCELLED = "cancelled"
        FAILED = "failed"

    ACTIVE = (Status.QUEUED, Status.RUNNING, Status.CANCELLING)
    RESUMABLE = (Status.FAILED, Status.CANCELLED)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="runs")
    creator = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="runs")
    name = models.CharField(max_length=200)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    backend = models.CharField(max_length=16, help_text="The engine backend: torch (cpu queue) or verl (gpu queue).")
    preset = models.CharField(max_length=32, blank=True)
    config = models.JSONField(help_text="The full engine RunConfig, validated.")
    seed = models.BigIntegerField(default=0)
    cloned_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="clones")
    experiment = models.ForeignKey(
        "experiments.Experiment", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    arm = models.CharField(max_length=64, blank=True, help_text="The experiment arm this run trains (empty: none).")

    created_at = models.DateTimeField(auto_now_add=True)
    queued_at = models.DateTimeField(default=timezone.now, help_text="When it was last submitted or resumed.")
    enqueued_at = models.DateTimeField(
        null=True, blank=True, help_text="When the broker accepted its task since it was queued (empty: not yet)."
    )
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    progress_at = models.DateTimeField(
        null=True, blank=True, help_text="When the worker last began a stage or finished a step."
    )
    stage = models.CharField(max_length=64, blank=True, help_text="What the worker is doing: 'rollout, step 7'.")

    step = models.IntegerField(default=0, help_text="The last step whose metrics are stored.")
    total_steps = models.IntegerField(default=0)
    error = models.TextField(blank=True)
    worker = models.CharField(max_length=200, blank=True, help_text="The Celery worker that holds (held) the run.")
    attempts = models.IntegerField(
        default=0, help_text="The number of the latest claim by a worker; only that attempt may write."
    )
    resume_checkpoint = models.ForeignKey(
        "Checkpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    best_instruction = models.ForeignKey(
        "Instruction", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    overhead = models.JSONField(default=dict, blank=True)
    evaluation_progress = models.JSONField(
        default=dict,
        blank=True,
        help_text="The evaluation in progress or last made: {step, done, total, benchmark, started, time}, and over "
        "the run's finished evaluations {seconds, questions, evaluations} (the recorder's, from EvalProgress).",
    )

    class Meta:
        ordering = ("-created_at",)
        indexes = (
            models.Index(fields=["team", "-created_at"], name="run_team_created"),
            models.Index(fields=["team", "status", "-created_at"], name="run_team_status_created"),
            models.Index(fields=["creator", "-created_at"], name="run_creator_created"),
            models.Index(fields=["status", "heartbeat_at"], name="run_status_heartbeat"),
            models.Index(fields=["experiment", "arm", "seed"], name="run_experiment_arm_seed"),
        )

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"

    @property
    def progress(self) -> float:
        """Fraction of steps done, 0–1."""
        return min(1.0, self.step / self.total_steps) if self.total_steps else 0.0

    @property
    def queue(self) -> str:
        return "gpu" if self.backend == "verl" else "cpu"

    @property
    def is_active(self) -> bool:
        """Not ended yet: pending (waiting for a slot of the team's quota), queued, running or cancelling."""
        return self.status in self.ACTIVE or self.status == self.Status.PENDING


class RunTag(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tags")
    name = models.CharField(max_length=64)

    class Meta:
        constraints = (models.UniqueConstraint(fields=["run", "name"], name="one_tag_name_per_run"),)
        indexes = (models.Index(fields=["name", "run"], name="runtag_name_run"),)

    def __str__(self) -> str:
        return self.name


class Instruction(models.Model):
    """An instruction of a run's population, with its parent (lineage) and where it came from."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="instructions")
    key = models.CharField(max_length=32, help_text="The engine's id, unique within the run (ins-0003).")
    text = models.TextField()
    origin = models.CharField(max_length=16, help_text="seed, manual, paraphrase, reflection, history or human")
    author = models.CharField(
        max_length=150, blank=True, help_text="Who wrote it, for an instruction a person injected (origin human)."
    )
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    birth_step = models.IntegerField()
    verify_score = models.FloatField(null=True, blank=True)
    round = models.ForeignKey(
        "EvolutionRound", null=True, blank=True, on_delete=models.SET_NULL, related_name="instructions"
    )
    retired_step = models.IntegerField(null=True, blank=True)
    retired_reason = models.CharField(max_length=200, blank=True)
    retired_weight = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ("run", "birth_step", "id")
        constraints = (models.UniqueConstraint(fields=["run", "key"], name="one_instruction_key_per_run"),)
        indexes = (models.Index(fields=["run", "birth_step"], name="instruction_run_birth"),)

    def __str__(self) -> str:
        return f"{self.key}: {self.text[:60]}"


class EvolutionRound(models.Model):
    """One optimizer call: the parent, the failures it was shown, its critique, cost, and the candidates."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="rounds")
    key = models.CharField(max_length=32, help_text="The engine's round id (r00015-001, or init).")
    step = models.IntegerField()
    number = models.IntegerField(default=0, help_text="Generate→verify round within this evolution.")
    proposer = models.CharField(max_length=16)
    parent = models.ForeignKey(Instruction, null=True, blank=True, on_delete=models.SET_NULL, related_name="rounds")
    critique = models.TextField(blank=True)
    failures = models.JSONField(default=list, blank=True)
    optimizer_model = models.CharField(max_length=200, blank=True)
    input_tokens = models.IntegerField(default=0)
    output_tokens = models.IntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    parent_score = models.FloatField(null=True, blank=True)
    n_questions = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("run", "step", "id")
        indexes = (models.Index(fields=["run", "step"], name="round_run_step"),)

    def __str__(self) -> str:
        return f"{self.key} ({self.proposer})"


class Candidate(models.Model):
    """One candidate instruction of a round: its verification score and why it was accepted or rejected."""

    round = models.ForeignKey(EvolutionRound, on_delete=models.CASCADE, related_name="candidates")
    position = models.IntegerField()
    text = models.TextField()
    valid = models.BooleanField(default=True)
    score = models.FloatField(null=True, blank=True)
    accepted = models.BooleanField(default=False)
    reason = models.TextField(blank=True, help_text="Why it was rejected (or empty).")
    instruction = models.ForeignKey(
        Instruction, null=True, blank=True, on_delete=models.SET_NULL, related_name="candidacies"
    )

    class Meta:
        ordering = ("round", "position")

    def __str__(self) -> str:
        return self.text[:60]


class PopulationSnapshot(models.Model):
    """The population after a step or a change (pruned, evolved, initialised)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="snapshots")
    step = models.IntegerField()
    reason = models.CharField(max_length=32)
    best = models.ForeignKey(Instruction, null=True, on_delete=models.SET_NULL, related_name="+")
    time = models.DateTimeField()

    class Meta:
        ordering = ("run", "step", "id")
        indexes = (models.Index(fields=["run", "step"], name="snapshot_run_step"),)


class PopulationMember(models.Model):
    snapshot = models.ForeignKey(PopulationSnapshot, on_delete=models.CASCADE, related_name="members")
    instruction = models.ForeignKey(Instruction, on_delete=models.CASCADE, related_name="memberships")
    weight = models.FloatField()
    probability = models.FloatField()
    samples = models.IntegerField()
    mean_reward = models.FloatField(null=True, blank=True)
    recent_reward = models.FloatField(
        null=True, blank=True, help_text="The mean of its per-step mean rewards over the steps its weight counts."
    )
    recent_low = models.FloatField(null=True, blank=True, help_text="The 95 % interval of recent_reward.")
    recent_high = models.FloatField(null=True, blank=True)
    recent_samples = models.IntegerField(null=True, blank=True, help_text="The groups behind recent_reward.")

    class Meta:
        ordering = ("snapshot", "-weight")


class DiversityRecord(models.Model):
    """How alike the population was at one of its records (a step's end, a prune, an evolution): the engine's
    population_diversity event. Pairwise measures are empty for a population of one."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="diversity")
    step = models.IntegerField()
    reason = models.CharField(max_length=32)
    size = models.IntegerField(help_text="Living instructions.")
    cosine_mean = models.FloatField(null=True, blank=True, help_text="Mean pairwise cosine of the embeddings.")
    cosine_min = models.FloatField(null=True, blank=True)
    cosine_max = models.FloatField(null=True, blank=True)
    jaccard_mean = models.FloatField(null=True, blank=True, help_text="Mean pairwise Jaccard overlap of word sets.")
    strategies = models.IntegerField(help_text="Groups of instructions at least strategy_cosine alike.")
    entropy = models.FloatField(help_text="Shannon entropy (nats) of the sampling distribution.")
    entropy_normalised = models.FloatField(null=True, blank=True, help_text="The entropy divided by ln N.")
    time = models.DateTimeField()

    class Meta:
        ordering = ("run", "step", "id")
        indexes = (models.Index(fields=["run", "step"], name="diversity_run_step"),)


class PopulationAlarm(models.Model):
    """The population collapsed: from which step, why, when the engine said so and when it recovered, and who of the
    team acknowledged it (an acknowledged alarm no longer shows its banner)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="alarms")
    step = models.IntegerField(help_text="The step the alarm tripped at.")
    since_step = models.IntegerField(help_text="The first of the consecutive collapsed steps.")
    reasons = models.JSONField(default=list, help_text="cosine and/or entropy.")
    cosine_min = models.FloatField(null=True, blank=True)
    entropy_normalised = models.FloatField(null=True, blank=True)
    collapse_cosine = models.FloatField(help_text="The run's threshold on every pair's cosine.")
    collapse_entropy = models.FloatField(help_text="The run's threshold on the normalised sampling entropy.")
    cleared_step = models.IntegerField(null=True, blank=True, help_text="When it recovered (empty: still collapsed).")
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    time = models.DateTimeField()

    class Meta:
        ordering = ("run", "step", "id")
        indexes = (models.Index(fields=["run", "step"], name="alarm_run_step"),)

    @property
    def active(self) -> bool:
        return self.cleared_step is None


class StepMetric(models.Model):
    """One step's metrics: reward, agent behaviour, the policy update's statistics and timings."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps")
    step = models.IntegerField()
    phase = models.CharField(max_length=16)
    reward_mean = models.FloatField()
    reward_std = models.FloatField()
    tool_calls_mean = models.FloatField()
    response_length_mean = models.FloatField()
    instruction_length_mean = models.FloatField()
    kl = models.FloatField(null=True, blank=True)
    entropy = models.FloatField(null=True, blank=True)
    clip_fraction = models.FloatField(null=True, blank=True)
    lr = models.FloatField(null=True, blank=True)
    grad_norm = models.FloatField(null=True, blank=True)
    pg_loss = models.FloatField(null=True, blank=True)
    metrics = models.JSONField(default=dict, help_text="Every metric the backend reported.")
    timings = models.JSONField(default=dict, help_text="Seconds per part of the step.")
    overhead = models.JSONField(default=dict)
    time = models.DateTimeField()

    class Meta:
        ordering = ("run", "step")
        constraints = (models.UniqueConstraint(fields=["run", "step"], name="one_metric_row_per_step"),)

    @property
    def step_seconds(self) -> float:
        return float(sum(self.timings.values())) if self.timings else 0.0


class Trajectory(models.Model):
    """A sampled rollout of a step, for the trajectory viewer."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="trajectories")
    step = models.IntegerField()
    instruction = models.ForeignKey(
        Instruction, null=True, blank=True, on_delete=models.SET_NULL, related_name="trajectories"
    )
    question = models.TextField()
    golden_answers = models.JSONField(default=list)
    response = models.TextField()
    answer = models.TextField(null=True, blank=True)
    reward = models.FloatField()
    tool_calls = models.IntegerField(default=0)
    response_tokens = models.IntegerField(default=0)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ("run", "step", "id")
        indexes = (models.Index(fields=["run", "step"], name="trajectory_run_step"),)


class Checkpoint(models.Model):
    """A saved checkpoint; `sha256` is the digest of its archive as the API streams it (the policy and the loop's
    state at that step), `optimizer_sha256` of the archive that also holds the optimizer state, `merged_sha256` of
    the archive whose policy/ is a LoRA run's merged policy (its last checkpoint only)."""

    LAYOUT_POLICY = 1
    """The archive holds policy/'s files alone (checkpoints stored before archives carried the population)."""
    LAYOUT_CHECKPOINT = 2
    """The archive is the checkpoint as on disk: inspo_state.json and policy/ (and training/ when asked)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.IntegerField()
    path = models.CharField(max_length=1000)
    bytes = models.BigIntegerField(help_text="Size of the whole checkpoint directory, as the engine reported it.")
    archive_bytes = models.BigIntegerField(default=0)
    sha256 = models.CharField(max_length=64, blank=True)
    files = models.JSONField(default=list, help_text="[{name, bytes, sha256}] of the policy directory.")
    available = models.BooleanField(default=True, help_text="False once the engine deleted it (keep_last).")
    layout = models.IntegerField(default=LAYOUT_CHECKPOINT, help_text="What the archive holds: 1 policy/ only, 2 all.")
    optimizer_bytes = models.BigIntegerField(default=0, help_text="Of `bytes`, the optimizer state (training/).")
    optimizer_archive_bytes = models.BigIntegerField(default=0, help_text="The archive with the optimizer state.")
    optimizer_sha256 = models.CharField(max_length=64, blank=True)
    optimizer_available = models.BooleanField(
        default=False, help_text="False once the engine dropped the optimizer state (only the newest keeps it)."
    )
    merged_archive_bytes = models.BigIntegerField(default=0, help_text="The archive with the merged policy (LoRA).")
    merged_sha256 = models.CharField(
        max_length=64, blank=True, help_text="Of the archive with the merged policy; blank when there is none."
    )
    disk_bytes = models.BigIntegerField(default=0, help_text="Every checkpoint of the run on disk after this one.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("run", "step")
        constraints = (models.UniqueConstraint(fields=["run", "step"], name="one_checkpoint_per_step"),)


class QueuedJob(models.Model):
    """Work on a run that a worker takes once from a queue: queued until a worker claims it (running, under the
    worker's name, with a heartbeat), then finished or failed with why. It never goes back to queued, so its one
    claim is its only attempt. Evaluation requests and heatmaps are queued jobs; `jobs` holds their lifecycle."""

    run: Run
    """Each kind declares its own ForeignKey to the run (with its own related name)."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        FINISHED = "finished"
        FAILED = "failed"

    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    enqueued_at = models.DateTimeField(null=True, blank=True, help_text="When the broker accepted its task.")
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True, help_text="The Celery worker that holds (held) it.")
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True


class EvaluationRequest(QueuedJob):
    """A request to evaluate a checkpoint on chosen benchmarks; its results arrive as Evaluation rows."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="evaluation_requests")
    checkpoint = models.ForeignKey(Checkpoint, on_delete=models.CASCADE, related_name="evaluation_requests")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    benchmarks = models.JSONField()
    limit = models.IntegerField(null=True, blank=True, help_text="Questions per benchmark (empty: all).")

    class Meta:
        ordering = ("-created_at",)


class Evaluation(models.Model):
    """One number: a benchmark's metric for an instruction (and checkpoint) of a run at a step."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="evaluations")
    step = models.IntegerField()
    benchmark = models.CharField(max_length=200)
    metric = models.CharField(max_length=32)
    value = models.FloatField()
    n = models.IntegerField()
    instruction = models.ForeignKey(
        Instruction, null=True, blank=True, on_delete=models.SET_NULL, related_name="evaluations"
    )
    checkpoint = models.ForeignKey(
        Checkpoint, null=True, blank=True, on_delete=models.SET_NULL, related_name="evaluations"
    )
    request = models.ForeignKey(
        EvaluationRequest, null=True, blank=True, on_delete=models.CASCADE, related_name="results"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("run", "benchmark", "step", "metric")
        indexes = (
            models.Index(fields=["run", "benchmark", "step"], name="evaluation_run_bench_step"),
            models.Index(fields=["benchmark", "metric"], name="evaluation_bench_metric"),
        )


class EvaluationAnswer(models.Model):
    """One question of an evaluation: its id, exact match, F1 and the answer given. Two evaluations on the same
    questions pair up by question id."""

    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="answers")
    question_id = models.CharField(max_length=200)
    em = models.FloatField()
    f1 = models.FloatField()
    answer = models.TextField(blank=True)

    class Meta:
        ordering = ("evaluation", "id")
        constraints = (models.UniqueConstraint(fields=["evaluation", "question_id"], name="one_answer_per_question"),)


class ControlRequest(models.Model):
    """A person's request to steer a live run's population — inject an instruction, pin, unpin or retire one. The
    worker hands pending ones to the engine, which handles each before a step and reports it applied or rejected."""

    class Kind(models.TextChoices):
        INJECT = "inject"
        PIN = "pin"
        UNPIN = "unpin"
        RETIRE = "retire"

    class Status(models.TextChoices):
        PENDING = "pending"
        APPLIED = "applied"
        REJECTED = "rejected"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="control_requests")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    payload = models.JSONField(help_text='inject: {"text", "verify"}; pin, unpin, retire: {"instruction_id"}.')
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    author_name = models.CharField(max_length=150, help_text="The author's username when asked (kept in the lineage).")
    created_at = models.DateTimeField(auto_now_add=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    outcome = models.TextField(blank=True, help_text="What the engine did with it, or why it refused.")
    applied_at_step = models.IntegerField(
        null=True,
        blank=True,
        help_text="The step it was handled before (applied or rejected). A pending request keeps it when a resume "
        "rewound the run past it: the engine replays it before that step.",
    )
    instruction_key = models.CharField(
        max_length=32, blank=True, help_text="The instruction it added or named (ins-0007)."
    )

    class Meta:
        ordering = ("run", "id")
        indexes = (models.Index(fields=["run", "status", "id"], name="control_run_status"),)

    def __str__(self) -> str:
        return f"{self.kind} ({self.status})"


class RunNote(models.Model):
    """An event worth showing on the timeline that has no table of its own (run started, optimizer failed, …)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="notes")
    step = models.IntegerField()
    kind = models.CharField(max_length=32)
    payload = models.JSONField(default=dict)
    time = models.DateTimeField()

    class Meta:
        ordering = ("run", "time", "id")
        indexes = (models.Index(fields=["run", "step"], name="note_run_step"),)


class Heatmap(QueuedJob):
    """An instruction × checkpoint evaluation of a run: each chosen instruction answers the same benchmark sample
    greedily with each chosen checkpoint's policy, one HeatmapCell per pair; cells fill in as they are scored."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="heatmaps")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    benchmark = models.CharField(max_length=1000, help_text="'builtin' or a FlashRAG file in the team's data.")
    sample_size = models.IntegerField(help_text="Questions of the benchmark's test split answered in every cell.")
    sample_seed = models.BigIntegerField(default=0, help_text="Draws the sample: same seed and size, same questions.")
    question_ids = models.JSONField(default=list, blank=True, help_text="The sample, once the worker drew it.")

    class Meta:
        ordering = ("-created_at", "-id")
        indexes = (models.Index(fields=["run", "-created_at"], name="heatmap_run_created"),)

    def __str__(self) -> str:
        return f"heatmap {self.pk} ({self.status})"


class HeatmapCell(models.Model):
    """One instruction answering the heatmap's sample with one checkpoint's policy: EM, F1 and every answer;
    empty until the worker scores it."""

    heatmap = models.ForeignKey(Heatmap, on_delete=models.CASCADE, related_name="cells")
    instruction = models.ForeignKey(Instruction, on_delete=models.CASCADE, related_name="heatmap_cells")
    checkpoint = models.ForeignKey(Checkpoint, on_delete=models.CASCADE, related_name="heatmap_cells")
    row = models.IntegerField(help_text="The instruction's row, from 0 (the order asked).")
    column = models.IntegerField(help_text="The checkpoint's column, from 0 (step order).")
    em = models.FloatField(null=True, blank=True)
    f1 = models.FloatField(null=True, blank=True)
    answered = models.FloatField(null=True, blank=True, help_text="Share of answers that ended in <answer>.")
    n = models.IntegerField(default=0, help_text="Questions answered.")
    trajectories = models.JSONField(default=list, blank=True, help_text="Every greedy answer (Trajectory.to_dict).")
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("heatmap", "row", "column")
        constraints = (
            models.UniqueConstraint(fields=["heatmap", "instruction", "checkpoint"], name="one_cell_per_pair"),
        )
