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


def needs_optimizer(config: RunConfig) -> bool:
    """Whether the run ever asks the optimizer LLM anything: evolution, or paraphrases to fill the population."""
    if config.mode == "static":
        return False
    if config.mode == "random-pool":
        return config.population.paraphrase_init and config.population.population_size > 1
    return config.evolution.enabled or (config.population.paraphrase_init and config.population.population_size > 1)
