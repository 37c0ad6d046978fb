"""verl's legacy `RayPPOTrainer` with the population in it, and the policy handle that verification and checkpoints
use; the INSPO logic itself lives in `loop.VerlLoop` (which drives the engine's CoEvolution).

Hooks (verl 0.9.1, `verl.trainer.ppo.ray_trainer.RayPPOTrainer`):
- `_load_checkpoint` — after verl restored its step, the loop restores the population saved with the engine
  checkpoint of that step (or builds the initial population) and emits RunStarted;
- `_get_gen_batch` — training: the pending step boundary runs (prune / evolve / verify / checkpoint, the rollout
  replicas holding the weights of the last update), then each question gets its sampled instruction as the system
  message; validation: every question gets I*;
- `_update_actor` — after verl's update, rewards are attributed by `uid`, the replay buffer filled, events emitted;
  a requested stop saves verl's checkpoint and ends the run here;
- `_validate` — verl's validation metrics per data source become EvalCompleted events for I*;
- `fit` — runs verl's loop, then the last boundary and RunFinished (or RunFailed).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from verl import DataProto
from verl.protocol import pad_dataproto_to_divisor, unpad_dataproto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils.metric import reduce_metrics

from ...checkpoints import POLICY_DIR
from ...env.protocol import Placement
from ...policy import QuestionResult, UpdateResult
from ...types import Question, RolloutRequest, Trajectory
from . import advantage  # noqa: F401  (registers the `inspo_grpo` estimator where verl computes advantages)
from .loop import Fields, VerlLoop, data_source_counts, object_array, with_instruction
from .overrides import AGENT_NAME
from .tracking import fenced_tracking

VERIFY_SOURCE = "inspo_verify"
"""`data_source` of the rows that verification generates."""

Merge = Callable[[Path, Path], None]
"""(verl actor checkpoint directory, target Hugging Face directory) → the merged model written there."""


class ValidationRecorder:
    """The rollout manager while verl validates: each question's result (its id, EM, F1 and answer, from the
    episode's summary) kept by data source, once per question (verl pads a batch with copies of its first rows).
    `progress(done, benchmark)` is told after each batch how many questions have been answered, and over which
    data source the batch's last question was."""

    def __init__(self, manager: Any, progress: Callable[[int, str], None] | None = None) -> None:
        self.manager = manager
        self.progress = progress
        self.results: dict[str, list[QuestionResult]] = {}
        self._seen: set[tuple[str, str]] = set()

    def generate_sequences(self, batch: DataProto) -> DataProto:
        output = self.manager.generate_sequences(batch)
        rows, fields = batch.non_tensor_batch, output.non_tensor_batch
        for i, info in enumerate(rows["extra_info"]):
            source, question = str(rows["data_source"][i]), str(info["question_id"])
            if (source, question) in self._seen:
                continue
            self._seen.add((source, question))
            answer = fields["inspo_answer"][i]
            result = QuestionResult(question, float(fields["inspo_em"][i]), float(fields["inspo_f1"][i]), answer)
            self.results.setdefault(source, []).append(result)
        if self.progress is not None and len(rows["data_source"]):
            self.progress(len(self._seen), str(rows["data_source"][-1]))
        return output

    def __getattr__(self, name: str) -> Any:
        return getattr(self.manager, name)


class RunStopped(Exception):
    """A stop was requested (cancel or time limit): the trainer saved a checkpoint and ends the run."""


def score_rows(instruction: str, questions: Sequence[Question], placement: Placement = "user") -> DataProto:
    """One row per question, shaped like the launcher's dataset rows, with `instruction` placed in its chat."""
    n = len(questions)
    rows: dict[str, Any] = {
        "dummy_tensor": torch.zeros((n, 1), dtype=torch.uint8),
        "raw_prompt": object_array(
            [with_instruction([{"role": "user", "content": q.text}], instruction, placement) for q in questions]
        ),
        "reward_model": object_array(
            [{"style": "rule", "ground_truth": {"target": list(q.golden_answers)}} for q in questions]
        ),
        "extra_info": object_array(
            [
                {"index": i, "question_id": q.id, "question": q.text, "golden_answers": list(q.golden_answers)}
                for i, q in enumerate(questions)
            ]
        ),
        "data_source": object_array([VERIFY_SOURCE] * n),
        "agent_name": object_array([AGENT_NAME] * n),
        "uid": object_array([f"verify-{i}" for i in range(n)]),
        "index": np.arange(n),
    }
    return DataProto.from_single_dict(rows)


class VerlPolicy:
    """The policy as the engine's loop sees it under verl: `score` generates with the current weights through
    the trainer's rollout replicas (greedy, G = 1); `save` merges verl's FSDP shards of the current step into a
    Hugging Face directory. Training rollouts and updates are verl's own, so `rollout`/`update`/`load` refuse."""

    name = "verl"
    computes_in = "bf16-mixed"  # FSDP's float32 masters with bfloat16 products, vLLM in bfloat16

    def __init__(
        self,
        trainer: Any,
        *,
        verl_dir: Path,
        merge: Merge,
        step: Callable[[], int],
        placement: Placement = "user",
    ) -> None:
        self.trainer = trainer
        self.verl_dir = verl_dir
        self.merge = merge
        self.step = step
        self.placement: Placement = placement

    def score(self, instruction: str, questions: Sequence[Question]) -> list[float]:
        return [float(r) for r in self._generate(instruction, questions).get("inspo_reward", [])]

    def evaluate(self, instruction: str, questions: Sequence[Question]) -> list[QuestionResult]:
        answers = self._generate(instruction, questions).get("inspo_answer", [None] * len(questions))
        return [QuestionResult.of(q, None if a is None else str(a)) for q, a in zip(questions, answers, strict=True)]

    def _generate(self, instruction: str, questions: Sequence[Question]) -> Fields:
        """One greedy rollout per question through the rollout replicas; returns their per-sample fields."""
        if not questions:
            return {}
        batch = score_rows(instruction, questions, self.placement)
        batch.meta_info = {"validate": True, "global_steps": self.step(), "recompute_log_prob": False}
        workers = int(self.trainer.config.actor_rollout_ref.rollout.agent.num_workers)
        padded, pad = pad_dataproto_to_divisor(batch, workers)
        output = unpad_dataproto(self.trainer.async_rollout_manager.generate_sequences(padded), pad_size=pad)
        fields: Fields = output.non_tensor_batch
        return fields

    def save(self, directory: Path) -> None:
        actor = self.verl_dir / f"global_step_{self.step()}" / "actor"
        if not actor.is_dir():
            raise FileNotFoundError(
                f"verl saved no checkpoint at {actor}: trainer.save_freq must match checkpoint.checkpoint_every"
            )
        self.merge(actor, directory / POLICY_DIR)

    def rollout(self, requests: Sequence[RolloutRequest], group_size: int) -> list[list[Trajectory]]:
        raise NotImplementedError("verl rolls out training batches itself")

    def update(self, groups: Sequence[Sequence[Trajectory]]) -> UpdateResult:
        raise NotImplementedError("verl updates the policy itself")

    def load(self, directory: Path) -> None:
        raise NotImplementedError("verl restores its own checkpoint (trainer.resume_from_path)")


class InspoRayPPOTrainer(RayPPOTrainer):
    """RayPPOTrainer whose batches carry the population's instructions (see the module docstring)."""

    inspo: VerlLoop
    _validating: bool = False
    _val_counts: Counter[str]

    def attach(self, loop: VerlLoop, *, state: Callable[[int], dict[str, Any] | None]) -> None:
        """Give the trainer its loop; `state(step)` reads the loop state saved with the checkpoint of `step`."""
        self.inspo = loop
        self._state_of = state
        self._val_counts = Counter()

    # -- verl's hooks ----------------------------------------------------------------------------------------

    def _load_checkpoint(self) -> Any:
        result = super()._load_checkpoint()
        step = int(getattr(self, "global_steps", 0) or 0)
        self.inspo.start(self._state_of(step) if step else None)
        return result

    def _get_gen_batch(self, batch: DataProto) -> DataProto:
        fields: Fields = batch.non_tensor_batch
        if self._validating:
            self._val_best = self.inspo.inject_best(fields)
            self._val_counts += data_source_counts(fields)
        else:
            self.inspo.begin_step(int(self.global_steps), fields)
        return super()._get_gen_batch(batch)

    def _update_actor(self, batch: DataProto) -> DataProto:
        output = super()._update_actor(batch)
        rewards = batch.batch["token_level_scores"].sum(dim=-1).tolist()
        metrics = reduce_metrics(output.meta_info["metrics"])
        self.inspo.end_step(int(self.global_steps), batch.non_tensor_batch, rewards, metrics)
        if self.inspo.should_stop():
            self._save_checkpoint()
            raise RunStopped
        return output

    def _validate(self, merged: bool = False) -> Any:
        self._validating, self._val_counts = True, Counter()
        manager: Any = self.async_rollout_manager  # type: ignore[has-type]
        step, total = int(self.global_steps), len(getattr(self, "val_dataset", None) or ())
        self.inspo.evaluating(step, 0, total)
        recorder = ValidationRecorder(manager, lambda done, source: self.inspo.evaluating(step, done, total, source))
        self.async_rollout_manager = recorder
        try:
            metrics = super()._validate(merged)
        finally:
            self._validating, self.async_rollout_manager = False, manager
        if isinstance(metrics, dict) and self._val_counts:
            self.inspo.evaluated(step, metrics, self._val_counts, self._val_best.id, answers=recorder.results)
        return metrics

    def fit(self) -> None:
        try:
            with fenced_tracking(self.inspo.tracker_failed):  # verl's own logger, fenced (verl/tracking.py)
                super().fit()
            status = "finished"
        except RunStopped:
            status = "cancelled"
        except BaseException as error:
            self.inspo.fail(error)
            raise
        self.inspo.finish(status)
