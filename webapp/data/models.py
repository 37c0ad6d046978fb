"""Data as a team resource: a dataset (questions or a corpus) under a name, its versions (one uploaded file each,
content-addressed by sha256 and never overwritten), which runs used which version, and index jobs. A dataset of no
team is the operator's shared data, read-only to every team."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from webapp.accounts.models import Team


class Dataset(models.Model):
    """A name a team's configs use as `data:<name>`; its versions hold the files."""

    class Kind(models.TextChoices):
        QUESTIONS = "questions"
        CORPUS = "corpus"

    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=64)
    kind = models.CharField(max_length=12, choices=Kind.choices)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("name", "id")
        constraints = (
            models.UniqueConstraint(fields=["team", "name"], name="dataset_unique_name_per_team"),
            models.UniqueConstraint(
                fields=["name"], condition=models.Q(team__isnull=True), name="dataset_unique_shared_name"
            ),
        )

    def __str__(self) -> str:
        return f"data:{self.name}"

    @property
    def shared(self) -> bool:
        return self.team_id is None


class DatasetVersion(models.Model):
    """One uploaded file of a dataset: the split it holds (a corpus's is `corpus`), stored as canonical JSONL under
    its sha256. Version n of a dataset is every split's newest file among versions 1 … n."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    split = models.CharField(max_length=64)
    sha256 = models.CharField(max_length=64, db_index=True)
    file = models.CharField(max_length=300, help_text="The canonical JSONL's name in the data storage.")
    size_bytes = models.BigIntegerField()
    records = models.PositiveIntegerField()
    source_name = models.CharField(max_length=255)
    source_format = models.CharField(max_length=16)
    lengths = models.JSONField(default=dict, help_text="Histogram of answer (or passage) lengths in words.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("dataset", "number")
        constraints = (models.UniqueConstraint(fields=["dataset", "number"], name="dataset_version_unique_number"),)


class DatasetUse(models.Model):
    """A run (or an experiment's run) that names a version: what the Data page lists, and what refuses a delete."""

    version = models.ForeignKey(DatasetVersion, on_delete=models.PROTECT, related_name="uses")
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="data_uses")

    class Meta:
        constraints = (models.UniqueConstraint(fields=["version", "run"], name="dataset_use_unique"),)


class DatasetJobUse(models.Model):
    """An evaluation request or a heatmap that names a version: a delete is refused while it is queued or running."""

    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="job_uses")
    evaluation = models.ForeignKey(
        "runs.EvaluationRequest", null=True, blank=True, on_delete=models.CASCADE, related_name="data_uses"
    )
    heatmap = models.ForeignKey(
        "runs.Heatmap", null=True, blank=True, on_delete=models.CASCADE, related_name="data_uses"
    )

    class Meta:
        constraints = (
            models.CheckConstraint(
                condition=models.Q(evaluation__isnull=False) ^ models.Q(heatmap__isnull=False),
                name="dataset_job_use_one_job",
            ),
        )


class RetiredName(models.Model):
    """A deleted dataset's name and the last version number it had: a later dataset of that name numbers its versions
    after it, so a pin (`data:<name>@<n>`) in a stored config, evaluation or note never comes to mean other bytes."""

    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=64)
    last_number = models.PositiveIntegerField()

    class Meta:
        constraints = (
            models.UniqueConstraint(fields=["team", "name"], name="retired_name_unique_per_team"),
            models.UniqueConstraint(
                fields=["name"], condition=models.Q(team__isnull=True), name="retired_name_unique_shared"
            ),
        )


class IndexJob(models.Model):
    """Building a corpus's retrieval index (BM25 or dense) on a CPU worker, as one version's team sees it. The index
    is cached by the corpus's sha256 and the method, so one build serves every team with the same bytes: each team's
    version has a job of its own (its id, its dataset, its cancel), and the jobs of one build share `build` and its
    progress. Nothing of another team's job is ever shown."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        CANCELLED = "cancelled"

    ENDED = (Status.DONE, Status.FAILED, Status.CANCELLED)

    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="index_jobs")
    sha256 = models.CharField(max_length=64)
    method = models.CharField(max_length=12)
    build = models.BigIntegerField(
        null=True,
        blank=True,
        db_index=True,
        help_text="The id of the job whose task builds the index (its own id for the job that started the build); "
        "internal, never shown.",
    )
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    passages_done = models.PositiveIntegerField(default=0)
    passages_total = models.PositiveIntegerField(default=0)
    rate = models.FloatField(null=True, blank=True, help_text="Passages per second so far.")
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at", "-id")

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the rate so far; None until a running job has a rate."""
        if self.status != self.Status.RUNNING or not self.rate:
            return None
        return round((self.passages_total - self.passages_done) / self.rate, 1)


class IndexWait(models.Model):
    """A queued run that waits for an index job before it trains (its task is sent again when the job ends)."""

    job = models.ForeignKey(IndexJob, on_delete=models.CASCADE, related_name="waits")
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="index_waits")
    since = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = (models.UniqueConstraint(fields=["job", "run"], name="index_wait_unique"),)


class ReachCheck(models.Model):
    """Whether a corpus can answer a questions file, before a run: of the split's questions, how many have a gold
    answer in the top `k` passages `method` retrieves for the question text, and how many anywhere in the corpus.
    One per (questions version × corpus version × method × k): computed once, then read."""

    class Status(models.TextChoices):
        WAITING = "waiting"  # for the corpus's index job
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        CANCELLED = "cancelled"

    ACTIVE = (Status.WAITING, Status.QUEUED, Status.RUNNING)
    ENDED = (Status.DONE, Status.FAILED, Status.CANCELLED)

    questions = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="reach_checks")
    corpus = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="+")
    method = models.CharField(max_length=12)
    k = models.PositiveSmallIntegerField()
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    index_job = models.ForeignKey(IndexJob, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    stage = models.CharField(max_length=12, blank=True, default="", help_text="search, then scan (the corpus).")
    done = models.PositiveBigIntegerField(default=0)
    total = models.PositiveBigIntegerField(default=0)
    question_count = models.PositiveIntegerField(default=0)
    reachable_topk = models.PositiveIntegerField(default=0, help_text="Questions reached in the top k.")
    reachable_anywhere = models.PositiveIntegerField(default=0, help_text="Questions reached anywhere in the corpus.")
    examples = models.JSONField(default=dict, help_text="A few questions reached nowhere, and only beyond the top k.")
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at", "-id")
        constraints = (
            models.UniqueConstraint(fields=["questions", "corpus", "method", "k"], name="reach_check_unique"),
        )

    def share(self, count: int) -> float | None:
        """`count` as a share of the questions; None until the check is done."""
        if self.status != self.Status.DONE or not self.question_count:
            return None
        return count / self.question_count

    @property
    def topk_share(self) -> float | None:
        return self.share(self.reachable_topk)

    @property
    def anywhere_share(self) -> float | None:
        return self.share(self.reachable_anywhere)


class StagedUpload(models.Model):
    """An upload checked and waiting for its team to see its first rows and keep it (the Data page's upload, see,
    confirm): its canonical file lies in the team's staging folder until it is confirmed (it becomes a version),
    discarded, or expires (both delete the file)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    name = models.CharField(max_length=64)
    kind = models.CharField(max_length=12, choices=Dataset.Kind.choices)
    split = models.CharField(max_length=64)
    path = models.CharField(max_length=500, help_text="The canonical JSONL in the staging folder.")
    sha256 = models.CharField(max_length=64)
    size_bytes = models.BigIntegerField()
    records = models.PositiveIntegerField()
    source_name = models.CharField(max_length=255)
    source_format = models.CharField(max_length=16)
    shape = models.CharField(max_length=40)
    ids_from = models.CharField(max_length=200)
    mapping = models.JSONField(default=dict, help_text="The field mapping sent with it (question_field, …).")
    lengths = models.JSONField(default=dict)
    rows = models.JSONField(default=list, help_text="Its first records as they will be read.")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ("-created_at",)
