"""Algorithm 1 driven by verl's training loop: the engine's CoEvolution, entered through its step API from the
trainer's hooks instead of running its own loop. It knows verl's batch fields (numpy arrays keyed by name), nothing
of Ray.

verl owns the data order, the rollouts and the updates; the CoEvolution this loop holds owns the population, the
replay buffer and the events. Per training step t:

1. `begin_step(t, fields)` — first the step boundary of t-1 (prune, evolve → verify with the current weights,
   checkpoint: `CoEvolution.step_boundary`), then one instruction per question by softmax(w/τ)
   (`CoEvolution.begin_step`): it becomes the system message of the question's `raw_prompt` (all G rollouts of the
   question share it), and its id is remembered by the question's `uid`;
2. `end_step(t, fields, metrics)` — the trajectories grouped by uid go to `CoEvolution.end_step`: the group-mean
   reward of each uid goes to its instruction, the trajectories to the replay buffer, and the step's events out.

The boundary of the last step runs in `finish`. Schedules (K_p, K_e, T_e, checkpoint_every) are CoEvolution's.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...coevolution import CoEvolution, RunResult, evaluation_file, write_answers
from ...env.protocol import Placement, chat_messages
from ...events import EvalCompleted, EvalProgress, TrackerFailed
from ...policy import QuestionResult
from ...population import Instruction, Population
from ...replay import ReplayBuffer
from ...types import Question, Trajectory

INSTRUCTION_ID = "inspo_instruction_id"
"""The batch field that tags every sample with the id of the instruction it was generated with."""

Fields = dict[str, np.ndarray]
"""verl's `DataProto.non_tensor_batch`: one object array per field, one entry per sample."""


class UnsupportedMode(ValueError):
    """The verl backend trains at every step; modes that optimise instructions with a frozen policy need torch."""


def object_array(items: Sequence[Any]) -> np.ndarray:
    """A 1-D object array, even when the items are lists of equal length (np.array would make a 2-D one)."""
    out = np.empty(len(items), dtype=object)
    out[:] = list(items)
    return out


def question_of(extra_info: Mapping[str, Any]) -> Question:
    """The engine's question from a row's `extra_info` (written by the launcher)."""
    return Question(
        str(extra_info["question_id"]),
        str(extra_info["question"]),
        tuple(str(a) for a in extra_info["golden_answers"]),
    )


def with_instruction(
    messages: Sequence[Mapping[str, Any]], instruction: str, placement: Placement = "user"
) -> list[dict[str, Any]]:
    """The row's chat (its question in the last user message; a system message it had is dropped) rebuilt around
    `instruction` as `chat_messages` places it, so verl sees the same prompt as the torch backend."""
    question = next(str(m["content"]) for m in reversed(messages) if m.get("role") == "user")
    return [dict(m) for m in chat_messages(instruction, question, placement)]


VERL_METRICS = {
    "actor/kl_loss": "kl",
    "actor/entropy": "entropy",
    "actor/pg_clipfrac": "clip_fraction",
    "actor/lr": "lr",
    "actor/grad_norm": "grad_norm",
    "actor/pg_loss": "pg_loss",
}
"""verl's actor metrics under the names the engine's torch trainer reports."""


def engine_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The scalar metrics of an update, verl's names plus the engine's names for the ones the dashboards plot.

    >>> engine_metrics({"actor/kl_loss": 0.5, "actor/lr": [1e-6, 1e-6], "note": "x"})
    {'actor/kl_loss': 0.5, 'actor/lr': 1e-06, 'kl': 0.5, 'lr': 1e-06}
    """
    out: dict[str, float] = {}
    for key, value in metrics.items():
        values = value if isinstance(value, list | tuple | np.ndarray) else [value]
        try:
            out[key] = float(np.mean([float(v) for v in values]))
        except (TypeError, ValueError):
            continue
    out.update({VERL_METRICS[key]: out[key] for key in VERL_METRICS if key in out})
    return out


class VerlLoop:
    """A CoEvolution whose steps are driven by verl's `RayPPOTrainer.fit` (see the module docstring)."""

    def __init__(self, coevolution: CoEvolution) -> None:
        """`coevolution` is the run as `build.build_run` wires it, with verl's policy as its backend."""
        config = coevolution.config
        if config.mode not in ("online", "static", "random-pool"):
            raise UnsupportedMode(
                f"mode {config.mode!r} optimises instructions with a frozen policy; the verl backend trains at every "
                "step (use mode online, static or random-pool, or the torch backend)"
            )
        self.coevolution = coevolution
        self.pending: int | None = None
        """The step whose boundary (prune, evolve, checkpoint) has not run yet."""
        self._by_uid: dict[str, Instruction] = {}
        self._chosen: list[Instruction] = []

    @property
    def population(self) -> Population:
        return self.coevolution.population

    @property
    def replay(self) -> ReplayBuffer:
        return self.coevolution.replay

    @property
    def step(self) -> int:
        """The step the loop is at: the last one begun."""
        return self.coevolution.progress.step

    def should_stop(self) -> bool:
        return self.coevolution.should_stop()

    # -- start ---------------------------------------------------------------------------------------------

    def start(self, state: Mapping[str, Any] | None = None) -> None:
        """Restore the loop's saved state (resuming) or build the initial population (seed + paraphrases)."""
        if state is not None:
            self.coevolution.load_state(state)
        self.coevolution.start()

    # -- one step ------------------------------------------------------------------------------------------

    def begin_step(self, step: int, fields: Fields) -> None:
        """Run the pending boundary, then give each question of the batch its sampled instruction."""
        self.run_boundary()
        uids = [str(u) for u in fields["uid"]]
        chosen = self.coevolution.begin_step(len(uids), step)
        self._by_uid = dict(zip(uids, chosen, strict=True))
        self._chosen = chosen
        self._inject(fields, chosen)

    def inject_best(self, fields: Fields) -> Instruction:
        """Evaluation: every question gets I* = argmax_j w_j."""
        best = self.population.best()
        self._inject(fields, [best] * len(fields["raw_prompt"]))
        return best

    def _inject(self, fields: Fields, chosen: Sequence[Instruction]) -> None:
        prompts, placement = fields["raw_prompt"], self.coevolution.config.env.instruction_placement
        fields["raw_prompt"] = object_array(
            [with_instruction(list(p), ins.text, placement) for p, ins in zip(prompts, chosen, strict=True)]
        )
        fields[INSTRUCTION_ID] = object_array([ins.id for ins in chosen])

    def end_step(self, step: int, fields: Fields, rewards: Sequence[float], metrics: Mapping[str, Any]) -> None:
        """Attribute the group-mean rewards by uid, fill the replay buffer, emit the step's events; `step` is the
        one `begin_step` entered."""
        assert step == self.step, f"end_step({step}) after begin_step({self.step})"
        groups = self._groups(fields, rewards)
        self.coevolution.end_step(groups, self._chosen, metrics=engine_metrics(metrics), timings={})
        self.pending = step

    def _groups(self, fields: Fields, rewards: Sequence[float]) -> list[list[Trajectory]]:
        """The batch's trajectories grouped by uid, in first-seen order (verl may have reordered the batch)."""
        groups: dict[str, list[Trajectory]] = defaultdict(list)
        for i, uid in enumerate(fields["uid"]):
            instruction = self._by_uid[str(uid)]
            groups[str(uid)].append(self._trajectory(instruction.id, fields, i, float(rewards[i])))
        return list(groups.values())

    @staticmethod
    def _trajectory(instruction_id: str, fields: Fields, i: int, reward: float) -> Trajectory:
        def get(name: str, default: Any = None) -> Any:
            return fields[name][i] if name in fields else default

        return Trajectory(
            instruction_id=instruction_id,
            question=question_of(fields["extra_info"][i]),
            response=str(get("inspo_response", "")),
            reward=reward,
            answer=get("inspo_answer"),
            tool_calls=int(get("inspo_tool_calls", 0)),
            response_tokens=int(get("inspo_response_tokens", 0)),
            error=get("inspo_error"),
        )

    def run_boundary(self) -> None:
        """Prune, evolve (verifying with the current weights) and checkpoint after the pending step, if any."""
        if self.pending is None:
            return
        self.pending = None
        self.coevolution.step_boundary()

    # -- evaluation and the end ----------------------------------------------------------------------------

    def evaluating(self, step: int, done: int, total: int, benchmark: str = "") -> None:
        """EvalProgress: verl's validation of `step` has answered `done` of its `total` questions (0 when verl's
        validation set has no length), sent as it starts and after each batch, as the torch backend's evaluation
        sends it after each chunk; `benchmark` is the data source of the question answered last (as EvalCompleted
        names it)."""
        self.coevolution.sink.emit(EvalProgress(step=step, done=done, total=max(total, done), benchmark=benchmark))

    def evaluated(
        self,
        step: int,
        metrics: Mapping[str, Any],
        counts: Mapping[str, int],
        instruction_id: str,
        answers: Mapping[str, Sequence[QuestionResult]] | None = None,
    ) -> None:
        """EvalCompleted per benchmark. With each question's result (`answers`, by data source) its EM is their
        mean, with their F1, and they go to the run directory's `evaluations/` as the torch backend's do; without
        them, verl's validation mean (`val-core/<data_source>/reward/mean@1`)."""
        for benchmark, n in counts.items():
            results = list((answers or {}).get(benchmark, ()))
            if results:
                rows = [result.to_dict() for result in results]
                if self.coevolution.out_dir is not None:
                    name = self.coevolution.benchmark_names.get(benchmark, benchmark)
                    write_answers(evaluation_file(self.coevolution.out_dir, step, name), rows)
                event = EvalCompleted(
                    step=step,
                    benchmark=benchmark,
                    metric="em",
                    value=float(np.mean([r.em for r in results])),
                    n=len(results),
                    instruction_id=instruction_id,
                    f1=float(np.mean([r.f1 for r in results])),
                    answers=rows,
                )
                self.coevolution.sink.emit(event)
                continue
            key = next((k for k in metrics if k.startswith(f"val-core/{benchmark}/reward/mean@")), None)
            if key is None:
                continue
            self.coevolution.sink.emit(
                EvalCompleted(
                    step=step,
                    benchmark=benchmark,
                    metric="em",
                    value=float(metrics[key]),
                    n=n,
                    instruction_id=instruction_id,
                )
            )

    def finish(self, status: str) -> RunResult:
        """The last step's boundary (when the run finished), the final checkpoint and RunFinished."""
        if status == "finished":
            self.run_boundary()
        return self.coevolution.finish(status)

    def tracker_failed(self, tracker: str, error: str) -> None:
        """TrackerFailed at the current step: one of verl's own tracker adapters failed, and the run goes on."""
        self.coevolution.sink.emit(TrackerFailed(step=self.step, tracker=tracker, error=error))

    def fail(self, error: BaseException) -> None:
        """RunFailed at the current step."""
        self.coevolution.fail(error)


def data_source_counts(fields: Fields) -> Counter[str]:
    """Questions per benchmark in a validation batch."""
    return Counter(str(source) for source in fields.get("data_source", []))
