"""What a run's config asks of the loop, as pure functions of the RunConfig: the phases its mode runs and whether it
ever calls the optimizer. It knows no population, backend or optimizer client, so the web app can ask cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import RunConfig


@dataclass(frozen=True)
class Phase:
    """A stretch of steps: `train` updates the policy; `evolve` runs pruning and evolution on their schedule."""

    name: str
    steps: int
    train: bool
    evolve: bool


def phases_for(config: RunConfig) -> list[Phase]:
    """The phases a mode runs: online co-evolves; static and random-pool never prune or evolve; pre/post optimise
    instructions with a frozen policy for `evolve_until` steps before or after RL."""
    train_steps, optimise_steps = config.grpo.total_steps, config.evolution.evolve_until
    evolving = config.evolution.enabled or config.population.prune
    if config.mode in ("static", "random-pool"):
        return [Phase("train", train_steps, train=True, evolve=False)]
    if config.mode == "pre":
        return [Phase("optimise", optimise_steps, False, True), Phase("train", train_steps, True, False)]
    if config.mode == "post":
        return [Phase("train", train_steps, True, False), Phase("optimise", optimise_steps, False, True)]
    return [Phase("train", train_steps, train=True, evolve=evolving)]


def evaluation_steps(config: RunConfig) -> list[int]:
    """The steps at which a fresh run that has evaluation sets evaluates I*, as `CoEvolution` schedules them: step 0
    (the untrained policy) with `eval.eval_at_start`, every `eval.eval_every`-th step of a training phase short of
    its last, and the run's last step (the final evaluation).

    >>> from .config import RunConfig
    >>> config = RunConfig()
    >>> config.grpo.total_steps, config.eval.eval_every, config.eval.eval_at_start = 12, 5, True
    >>> evaluation_steps(config)
    [0, 5, 10, 12]
    """
    every, offset = config.eval.eval_every, 0
    steps = [0] if config.eval.eval_at_start else []
    for phase in phases_for(config):
        if phase.train and every:
            steps += [offset + local for local in range(every, phase.steps, every)]
        offset += phase.steps
    return [*steps, offset]


def needs_optimizer(config: RunConfig) -> bool:
    """Whether the run ever asks the optimizer LLM anything: evolution, or paraphrases to fill the population."""
    if config.mode == "static":
        return False
    if config.mode == "random-pool":
        return config.population.paraphrase_init and config.population.population_size > 1
    return config.evolution.enabled or (config.population.paraphrase_init and config.population.population_size > 1)
