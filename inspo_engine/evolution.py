"""How the population changes, and the events each change emits: the initial population, pruning, and one evolution
(select the parents → generate candidates with the optimizer → verify them with the policy → replace the
population). It knows nothing of the schedule (when these run), the step loop or checkpoints.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .config import RunConfig
from .diversity import DiversityTracker
from .events import (
    BudgetExhausted,
    CandidateInfo,
    EventSink,
    EvolutionCompleted,
    InstructionAdded,
    InstructionProposed,
    InstructionPruned,
    InstructionVerified,
    OptimizerFailed,
    Overhead,
    PopulationChanged,
    StageStarted,
)
from .optimizers.base import OptimizerBudget, OptimizerClient, OptimizerError
from .policy import PolicyBackend
from .population import Instruction, Population
from .proposers import (
    OPTIMIZER_SYSTEM_PROMPT,
    FailureExample,
    ScoredInstruction,
    build_prompt,
    parse_proposal,
)
from .replay import ReplayBuffer
from .types import Question

Accepted = tuple[Instruction, str, float | None, str]
"""A verified candidate: (its parent, its text, its verification score or None unscored, its round id)."""


class Ledger:
    """What INSPO has spent so far, as the Overhead its events carry; the loop and evolution both charge it."""

    def __init__(self) -> None:
        self.overhead = Overhead()

    def charge(self, **counts: int) -> None:
        """Add to the named counters: `charge(verification_rollouts=40)`."""
        self.overhead = replace(self.overhead, **{name: getattr(self.overhead, name) + n for name, n in counts.items()})


class Evolution:
    """The population's changes for one run. It asks the optimizer (within the run's budget) and scores candidates
    with the backend's current policy; `rounds` and the budget are part of the run's saved state."""

    def __init__(
        self,
        config: RunConfig,
        *,
        population: Population,
        replay: ReplayBuffer,
        backend: PolicyBackend,
        optimizer: OptimizerClient | None,
        sink: EventSink,
        rng: random.Random,
        ledger: Ledger,
    ) -> None:
        """`rng` draws failures and verification questions from the replay buffer."""
        self.config = config
        self.population = population
        self.replay = replay
        self.backend = backend
        self.optimizer = optimizer
        self.sink = sink
        self.rng = rng
        self.ledger = ledger
        self.budget = OptimizerBudget(max_calls=config.optimizer.max_calls, max_tokens=config.optimizer.max_tokens)
        self.budget_reported = False
        self.rounds = 0
        pop = config.population
        self.diversity = (
            DiversityTracker(
                strategy_cosine=pop.strategy_cosine,
                collapse_cosine=pop.collapse_cosine,
                collapse_entropy=pop.collapse_entropy,
                collapse_steps=pop.collapse_steps,
            )
            if pop.diversity
            else None
        )

    # -- population changes --------------------------------------------------------------------------------

    def add(
        self,
        text: str,
        *,
        origin: Any,
        step: int,
        parent_id: str | None,
        score: float | None = None,
        round_id: str | None = None,
        author: str | None = None,
    ) -> Instruction:
        instruction = self.population.add(
            text, origin=origin, step=step, parent_id=parent_id, verify_score=score, author=author
        )
        self.sink.emit(
            InstructionAdded(step=step, instruction=instruction.info(), verify_score=score, round_id=round_id)
        )
        return instruction

    def retire(self, instruction: Instruction, step: int, reason: str) -> None:
        weight = self.population.weight_of(instruction)
        self.population.retire(instruction.id, step=step, reason=reason)
        self.sink.emit(InstructionPruned(step=step, instruction_id=instruction.id, weight=weight, reason=reason))

    def emit_population(self, step: int, reason: str) -> None:
        """The population as it is now (PopulationChanged), then how diverse it is and whether it collapsed."""
        self.sink.emit(
            PopulationChanged(
                step=step, reason=reason, members=self.population.snapshot(), best_id=self.population.best().id
            )
        )
        if self.diversity is not None:
            members, probabilities = self.population.members, self.population.probabilities()
            texts = [m.text for m in members]
            for event in self.diversity.observe(step, reason, texts, [probabilities[m.id] for m in members]):
                self.sink.emit(event)

    def diversity_state(self) -> dict[str, Any] | None:
        """The collapse alarm's count of steps, for the run's saved state."""
        return self.diversity.monitor.to_state() if self.diversity is not None else None

    def load_diversity_state(self, state: Mapping[str, Any] | None) -> None:
        """Restore `diversity_state` (a state saved without one starts the count afresh)."""
        if self.diversity is not None and state:
            self.diversity.monitor.load_state(state)

    def initialise(self) -> None:
        """Seed, then the user's instructions, then optimizer paraphrases of the seed up to the population size."""
        pop = self.config.population
        self._stage(0, "initialise")
        self.add(pop.seed_instruction, origin="seed", step=0, parent_id=None)
        if self.config.mode in ("online", "pre", "random-pool"):
            for text in pop.initial_instructions:
                self.add(text, origin="manual", step=0, parent_id=None)
            self.fill_with_paraphrases(0)
        self.emit_population(0, "initialised")

    def refill(self, step: int) -> None:
        """Before optimising against a trained policy (mode `post`): the user's instructions and paraphrases join
        the population again."""
        for text in self.config.population.initial_instructions:
            self.add(text, origin="manual", step=step, parent_id=None)
        self.fill_with_paraphrases(step)

    def fill_with_paraphrases(self, step: int) -> None:
        slots = self.population.max_size - len(self.population)
        if not self.config.population.paraphrase_init or slots <= 0 or self.optimizer is None:
            return
        seed = self.population.members[0]
        round_id = f"init-{step:05d}"
        texts = self._propose_round(step, seed, "paraphrase", slots, round_id=round_id)
        for text in texts[:slots]:
            self.add(text, origin="paraphrase", step=step, parent_id=seed.id, round_id=round_id)
        if texts:
            self.emit_population(step, "initialised")

    def freeze(self, step: int) -> None:
        """After optimising with a frozen policy (mode `pre`): only I* stays to train."""
        best = self.population.best()
        for member in self.population.members:
            if member.id != best.id:
                self.retire(member, step, "frozen: only the best instruction trains")
        self.emit_population(step, "frozen")

    def prune(self, step: int) -> None:
        """Successive halving by weight (never below n_parents)."""
        weights = self.population.weights()
        dropped = self.population.prune(step)
        for instruction in dropped:
            self.sink.emit(
                InstructionPruned(
                    step=step, instruction_id=instruction.id, weight=weights[instruction.id], reason="pruned"
                )
            )
        if dropped:
            self.emit_population(step, "pruned")

    # -- evolution: select → generate → verify ---------------------------------------------------------------

    def evolve(self, step: int) -> None:
        """Select the parents, then generate → verify rounds until every parent's share of the free slots is
        filled or `max_verify_rounds` rounds ran. Each round asks the optimizer once per parent whose share is not
        full yet, so with several parents every one of them gets proposals. Pinned members stay and hold their
        slots."""
        parents = self.population.top(self.population.n_parents)
        pinned = [m for m in self.population.members if m.pinned and m not in parents]
        shares = slot_shares(self.population.max_size - len(parents) - len(pinned), len(parents))
        evo = self.config.evolution
        questions = self.replay.verification_set(self.rng, evo.verify_samples) if evo.verify else []
        parent_scores: dict[str, float] = {}
        accepted: list[Accepted] = []
        rounds = 0
        rollouts_before = self.ledger.overhead.verification_rollouts
        while rounds < evo.max_verify_rounds and self._budget_left(step):
            wanting = [
                (p, share - sum(a[0].id == p.id for a in accepted)) for p, share in zip(parents, shares, strict=True)
            ]
            wanting = [(p, left) for p, left in wanting if left > 0]
            if not wanting:
                break
            rounds += 1
            for parent, left in wanting:
                if not self._budget_left(step):
                    break
                round_id, texts = self._generate(step, parent, rounds)
                taken = {text for _, text, _, _ in accepted}
                fresh = [t for t in texts if t not in taken and not self.population.contains_text(t)]
                for text, score in self._verify(step, round_id, parent, fresh, questions, parent_scores, left):
                    accepted.append((parent, text, score, round_id))
        added = self._replace_population(step, parents, accepted)
        self.sink.emit(
            EvolutionCompleted(
                step=step,
                parent_ids=[p.id for p in parents],
                added_ids=[ins.id for ins in added],
                rounds=rounds,
                verification_rollouts=self.ledger.overhead.verification_rollouts - rollouts_before,
            )
        )
        self.emit_population(step, "evolved")

    def _replace_population(self, step: int, parents: list[Instruction], accepted: list[Accepted]) -> list[Instruction]:
        """Parents ∪ pinned members ∪ verified candidates; nothing changes when no candidate was accepted."""
        if not accepted:
            return []
        parent_ids = {p.id for p in parents}
        for member in self.population.members:
            if member.id not in parent_ids and not member.pinned:
                self.retire(member, step, "replaced at evolution")
        origin = self.config.evolution.proposer
        added = [
            self.add(text, origin=origin, step=step, parent_id=parent.id, score=score, round_id=round_id)
            for parent, text, score, round_id in accepted
        ]
        reset_ids = None if self.config.evolution.reset_weights == "all" else [ins.id for ins in added]
        self.population.reset_weights(step, reset_ids)
        return added

    def verify_outside(self, step: int, text: str, *, round_id: str, rng: random.Random) -> CandidateInfo:
        """Verify a candidate that did not come from the optimizer (a person's) as evolution verifies its own: scored
        on D_B drawn with `rng` (not the run's own stream) with the current policy, against I* — its stand-in
        parent — on the same questions, the InstructionVerified event under `round_id`. Its verdict: accepted or
        why not, and its score (None: this run does not verify, or nothing to verify on yet)."""
        evo = self.config.evolution
        questions = self.replay.verification_set(rng, evo.verify_samples) if evo.verify else []
        (verdict,) = self._judge(step, round_id, self.population.best(), [text], questions, {}, 1)
        return verdict

    def _generate(self, step: int, parent: Instruction, round_no: int) -> tuple[str, list[str]]:
        self.rounds += 1
        round_id = f"r{step:05d}-{self.rounds:03d}"
        texts = self._propose_round(
            step,
            parent,
            self.config.evolution.proposer,
            self.config.evolution.n_candidates,
            round_id=round_id,
            round_no=round_no,
        )
        return round_id, texts

    def _propose_round(
        self, step: int, parent: Instruction, kind: str, n: int, *, round_id: str, round_no: int = 0
    ) -> list[str]:
        """One optimizer call; emits what it was shown, its critique and candidates. Failures emit and return []."""
        assert self.optimizer is not None
        if not self._budget_left(step):
            return []
        self._stage(step, "propose")
        failures = self._failures_for(parent) if kind == "reflection" else []
        history = self._history() if kind == "history" else []
        prompt = build_prompt(
            kind,  # type: ignore[arg-type]
            parent=parent.text,
            n=n,
            failures=failures,
            history=history,
            placement=self.config.env.instruction_placement,
        )
        try:
            completion = self.optimizer.complete(prompt, system=OPTIMIZER_SYSTEM_PROMPT)
        except OptimizerError as error:
            self.budget.charge_failure()
            self.ledger.charge(optimizer_calls=1)
            self.sink.emit(OptimizerFailed(step=step, error=str(error)))
            return []
        self.budget.charge(completion)
        self.ledger.charge(optimizer_calls=1, optimizer_tokens=completion.total_tokens)
        proposal = parse_proposal(completion.text, parent=parent.text, n=n)
        candidates = [CandidateInfo(text=t, valid=True) for t in proposal.candidates]
        candidates += [CandidateInfo(text=r.text, valid=False, reason=r.reason) for r in proposal.rejected]
        self.sink.emit(
            InstructionProposed(
                step=step,
                round_id=round_id,
                round=round_no,
                proposer=kind,
                parent_id=parent.id,
                critique=proposal.critique,
                failures=[f.__dict__ | {"golden_answers": list(f.golden_answers)} for f in failures],
                candidates=candidates,
                optimizer_model=completion.model,
                input_tokens=completion.input_tokens,
                output_tokens=completion.output_tokens,
            )
        )
        return list(proposal.candidates)

    def _verify(
        self,
        step: int,
        round_id: str,
        parent: Instruction,
        texts: list[str],
        questions: list[Question],
        parent_scores: dict[str, float],
        slots: int,
    ) -> list[tuple[str, float | None]]:
        """The candidates that join: see `_judge`."""
        verdicts = self._judge(step, round_id, parent, texts, questions, parent_scores, slots)
        return [(v.text, v.score) for v in verdicts if v.accepted]

    def _judge(
        self,
        step: int,
        round_id: str,
        parent: Instruction,
        texts: list[str],
        questions: list[Question],
        parent_scores: dict[str, float],
        slots: int,
    ) -> list[CandidateInfo]:
        """Score candidates on D_B with the current policy and accept the top ones that fit and clear the bar: with
        `verify_min_ratio` r > 0 the parent is scored on the same questions and a candidate scoring below
        r × the parent's score is rejected (r = 1: no candidate worse than its parent joins). Without verification
        (or questions) the first `slots` are accepted unscored. Each verdict, best first."""
        if not texts:
            return []
        if not self.config.evolution.verify or not questions:
            return [CandidateInfo(text=t, valid=True, accepted=i < slots) for i, t in enumerate(texts)]
        self._stage(step, "verify")
        scores = {text: self._score(text, questions) for text in texts}
        ratio = self.config.evolution.verify_min_ratio
        bar = 0.0
        if ratio > 0:
            if parent.id not in parent_scores:
                parent_scores[parent.id] = self._score(parent.text, questions)
            bar = ratio * parent_scores[parent.id]
        ranked = sorted(texts, key=lambda t: -scores[t])
        kept = [t for t in ranked if scores[t] >= bar][:slots]
        verdicts = [
            CandidateInfo(
                text=t, valid=True, score=scores[t], accepted=t in kept, reason=_verdict(t, kept, scores, bar)
            )
            for t in ranked
        ]
        self.sink.emit(
            InstructionVerified(
                step=step,
                round_id=round_id,
                parent_id=parent.id,
                parent_score=parent_scores.get(parent.id),
                n_questions=len(questions),
                candidates=verdicts,
            )
        )
        return verdicts

    def _score(self, text: str, questions: list[Question]) -> float:
        rewards = self.backend.score(text, questions)
        self.ledger.charge(verification_rollouts=len(questions))
        return statistics.fmean(rewards) if rewards else 0.0

    def _failures_for(self, parent: Instruction) -> list[FailureExample]:
        picked = self.replay.failures(self.rng, self.config.evolution.n_failures, instruction_id=parent.id)
        return [FailureExample(t.question.text, t.response, t.question.golden_answers, t.reward) for t in picked]

    def _history(self) -> list[ScoredInstruction]:
        scored = [(ins.text, ins.lifetime_reward()) for ins in self.population.archive.values()]
        return [ScoredInstruction(text, 100.0 * reward) for text, reward in scored if reward is not None]

    def _budget_left(self, step: int) -> bool:
        if not self.budget.exhausted():
            return True
        if not self.budget_reported:
            self.budget_reported = True
            self.sink.emit(BudgetExhausted(step=step, calls=self.budget.calls, tokens=self.budget.tokens))
        return False

    def _stage(self, step: int, stage: str) -> None:
        self.sink.emit(StageStarted(step=step, stage=stage))


def _verdict(text: str, kept: list[str], scores: dict[str, float], bar: float) -> str | None:
    if text in kept:
        return None
    if scores[text] < bar:
        return f"scored {scores[text]:.3f}, below the bar {bar:.3f} set by its parent"
    return "outranked: the population is full"


def slot_shares(slots: int, parents: int) -> list[int]:
    """The free slots split as evenly as possible between the parents, the best parent first.

    >>> slot_shares(6, 1)
    [6]
    >>> slot_shares(5, 2)
    [3, 2]
    >>> slot_shares(1, 3)
    [1, 0, 0]
    """
    return [slots // parents + (1 if i < slots % parents else 0) for i in range(parents)]
