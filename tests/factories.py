"""factory_boy factories for the web app's models (tests only: they write rows directly)."""

from __future__ import annotations

from datetime import UTC, datetime

import factory

from inspo_engine.presets import preset
from webapp.accounts.models import Membership, Team, User
from webapp.runs.models import (
    Checkpoint,
    Evaluation,
    EvolutionRound,
    Instruction,
    PopulationMember,
    PopulationSnapshot,
    Run,
    StepMetric,
    Trajectory,
)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("correct horse battery staple")


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team
        django_get_or_create = ("slug",)

    name = factory.Sequence(lambda n: f"Team {n}")
    slug = factory.Sequence(lambda n: f"team-{n}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    team = factory.SubFactory(TeamFactory)
    role = "member"


class RunFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Run

    team = factory.SubFactory(TeamFactory)
    creator = factory.SubFactory(UserFactory)
    name = factory.Sequence(lambda n: f"run {n}")
    backend = "torch"
    preset = "smoke"
    config = factory.LazyFunction(lambda: preset("smoke").to_dict())
    total_steps = 4


class InstructionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Instruction

    run = factory.SubFactory(RunFactory)
    key = factory.Sequence(lambda n: f"ins-{n:04d}")
    text = factory.Sequence(lambda n: f"Search before answering, variant {n}.")
    origin = "seed"
    birth_step = 0


class EvolutionRoundFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = EvolutionRound

    run = factory.SubFactory(RunFactory)
    key = factory.Sequence(lambda n: f"r00002-{n:03d}")
    step = 2
    number = 1
    proposer = "reflection"
    critique = "The agent answered from memory."


class StepMetricFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = StepMetric

    run = factory.SubFactory(RunFactory)
    step = factory.Sequence(lambda n: n + 1)
    phase = "train"
    reward_mean = 0.25
    reward_std = 0.1
    tool_calls_mean = 1.0
    response_length_mean = 40.0
    instruction_length_mean = 60.0
    kl = 0.001
    lr = 1e-5
    timings = factory.LazyFunction(lambda: {"rollout": 1.0, "update": 0.5})
    time = factory.LazyFunction(lambda: datetime.now(tz=UTC))


class PopulationSnapshotFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = PopulationSnapshot

    run = factory.SubFactory(RunFactory)
    step = 1
    reason = "step"
    time = factory.LazyFunction(lambda: datetime.now(tz=UTC))


class PopulationMemberFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = PopulationMember

    snapshot = factory.SubFactory(PopulationSnapshotFactory)
    instruction = factory.SubFactory(InstructionFactory)
    weight = 0.5
    probability = 1.0
    samples = 2
    mean_reward = 0.5


class TrajectoryFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Trajectory

    run = factory.SubFactory(RunFactory)
    step = 1
    question = "What is the capital of France?"
    golden_answers = factory.LazyFunction(lambda: ["Paris"])
    response = "<search> capital of France </search> <answer> Paris </answer>"
    answer = "Paris"
    reward = 1.0


class CheckpointFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Checkpoint

    run = factory.SubFactory(RunFactory)
    step = 2
    path = factory.LazyAttribute(lambda c: f"/nonexistent/{c.run.pk}/checkpoints/step-{c.step:06d}")
    bytes = 1024


class EvaluationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Evaluation

    run = factory.SubFactory(RunFactory)
    step = 4
    benchmark = "builtin"
    metric = "em"
    value = 0.5
    n = 4
