"""What an experiment is: a team's base preset and overrides, named arms, seeds and one held-out evaluation. Its runs
are ordinary runs (Run.experiment, Run.arm, Run.seed); its table and verdicts are computed from them on read."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from inspo_engine.experiments import EvalSpec
from webapp.accounts.models import Team

MAX_EXPERIMENT_RUNS = 48
"""The most runs (arms × seeds) one experiment may start."""


def runs_over_limit(runs: int) -> str | None:
    """Why an experiment of `runs` runs (arms × seeds) may not start, or None when it may.

    >>> runs_over_limit(49)
    '49 runs (arms × seeds); an experiment may start at most 48'
    """
    return (
        f"{runs} runs (arms × seeds); an experiment may start at most {MAX_EXPERIMENT_RUNS}"
        if runs > MAX_EXPERIMENT_RUNS
        else None
    )


class Experiment(models.Model):
    """Arms × seeds over one base config. `status` holds what a person did (running, or cancelled); whether every
    run has ended is read from the runs (selectors.experiment_state)."""

    class Status(models.TextChoices):
        RUNNING = "running"
        CANCELLED = "cancelled"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="experiments")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="experiments"
    )
    name = models.CharField(max_length=200)
    preset = models.CharField(max_length=32)
    overrides = models.JSONField(default=dict, blank=True, help_text="Overrides of the preset every arm shares.")
    arms = models.JSONField(
        help_text="[[arm name, its overrides], …] in the experiment's order, built-in arms resolved to theirs (a "
        "list: PostgreSQL's jsonb keeps no key order)."
    )
    seeds = models.JSONField(help_text="The seeds every arm trains with.")
    evaluation = models.JSONField(
        help_text="{benchmarks, split, size, sample_seed}: the same questions for every run (stored before several "
        "benchmarks were allowed: {benchmark, …})."
    )
    baseline = models.CharField(max_length=64, help_text="The arm every other arm is compared with.")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.RUNNING)
    estimate = models.JSONField(
        default=dict,
        blank=True,
        help_text="What it was estimated to cost when it was submitted (selectors.experiment_estimate, as the API "
        "answers it); empty for one submitted before estimates were kept.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("-created_at", "-id")
        indexes = (models.Index(fields=["team", "-created_at"], name="experiment_team_created"),)

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"

    def spec(self) -> dict[str, Any]:
        """The experiment as the engine's `experiment_from_dict` (and the API) take it."""
        return {
            "preset": self.preset,
            "overrides": self.overrides,
            "arms": self.arm_overrides,
            "seeds": self.seeds,
            "evaluation": self.evaluation_spec,
            "baseline": self.baseline,
        }

    @property
    def evaluation_spec(self) -> dict[str, Any]:
        """The evaluation with its benchmarks as a list, also for one stored with a single `benchmark`."""
        return EvalSpec.from_dict(self.evaluation).to_dict()

    @property
    def arm_overrides(self) -> dict[str, dict[str, Any]]:
        """Arm name → its overrides, in the experiment's order."""
        return {str(name): dict(overrides) for name, overrides in self.arms}

    @property
    def arm_names(self) -> list[str]:
        return [str(name) for name, _ in self.arms]

    @property
    def run_count(self) -> int:
        return len(self.arms) * len(self.seeds)
