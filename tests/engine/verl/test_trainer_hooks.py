"""The trainer's INSPO hooks, driven directly with verl's own DataProto batches and no Ray or GPU: instruction
injection, reward attribution by uid, prune / evolve / verify on the paper's step numbers, checkpoints with the
population beside the merged policy, and restoring them."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.engine.verl._support import require_verl

require_verl()

from omegaconf import OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402

from inspo_engine.backends.verl.loop import INSTRUCTION_ID, UnsupportedMode, VerlLoop, object_array  # noqa: E402
from inspo_engine.backends.verl.overrides import AGENT_NAME  # noqa: E402
from inspo_engine.backends.verl.trainer import InspoRayPPOTrainer, ValidationRecorder, VerlPolicy  # noqa: E402
from inspo_engine.build import RunInputs, build_run  # noqa: E402
from inspo_engine.config import RunConfig  # noqa: E402
from inspo_engine.env.protocol import chat_messages  # noqa: E402
from inspo_engine.events import (  # noqa: E402
    CheckpointSaved,
    EvalCompleted,
    EvalProgress,
    EvolutionCompleted,
    InstructionPruned,
    InstructionVerified,
    ListSink,
    PopulationChanged,
    RunFinished,
    RunStarted,
    StepCompleted,
)
from inspo_engine.presets import preset  # noqa: E402
from inspo_engine.types import Question  # noqa: E402
from inspo_engine.verl_job import checkpoint_state  # noqa: E402

G = 2


def paper_like(**overrides: Any) -> RunConfig:
    """The paper's population schedule (N_P 7, K_p 5, K_e 15, T_e 150) with tiny batches and the offline optimizer."""
    return preset("paper").with_overrides(
        {
            "optimizer.provider": "rules",
            "batch_size": 4,
            "mini_batch_size": 4,
            "micro_batch_size": 4,
            "group_size": G,
            "verify_samples": 6,
            "checkpoint.checkpoint_every": 100,
            **overrides,
        }
    )


def questions(n: int) -> list[Question]:
    return [Question(f"q{i}", f"Question number {i}?", (f"answer {i}",)) for i in range(n)]


class FakeRolloutManager:
    """verl's AgentLoopManager.generate_sequences: one greedy rollout per row; an instruction scores by how many
    times it says 'search' (so verification has something to rank)."""

    def __init__(self) -> None:
        self.batches: list[DataProto] = []

    def generate_sequences(self, batch: DataProto) -> DataProto:
        self.batches.append(batch)
        rewards = [min(1.0, instruction_of(p).count("search") / 4) for p in batch.non_tensor_batch["raw_prompt"]]
        return DataProto.from_single_dict(
            {
                "responses": torch.zeros((len(batch), 1), dtype=torch.long),
                "inspo_reward": object_array(rewards),
                "inspo_em": object_array([float(r == 1.0) for r in rewards]),
                "inspo_f1": object_array([float(r == 1.0) for r in rewards]),
                "inspo_answer": object_array(
                    [
                        model["ground_truth"]["target"][0] if r == 1.0 else None
                        for model, r in zip(batch.non_tensor_batch["reward_model"], rewards, strict=True)
                    ]
                ),
            }
        )


def instruction_of(prompt: list[dict[str, str]]) -> str:
    """The instruction in a chat built by `chat_messages` (either placement)."""
    first = prompt[0]["content"]
    return first if prompt[0]["role"] == "system" else first.split("\nQuestion: ")[0]


class Harness:
    """A VerlLoop with a VerlPolicy over the fake rollout manager, wired by `build_run` as the job wires it, and
    verl-shaped batches for each step."""

    def __init__(self, config: RunConfig, out_dir: Path, sink: ListSink | None = None) -> None:
        self.config = config
        self.sink = sink or ListSink()
        self.manager = FakeRolloutManager()
        trainer = type("T", (), {})()
        trainer.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"agent": {"num_workers": 4}}}})
        trainer.async_rollout_manager = self.manager
        self.merged: list[tuple[Path, Path]] = []
        self.out_dir = out_dir
        self.loop: VerlLoop
        self.policy = VerlPolicy(trainer, verl_dir=out_dir / "verl", merge=self.merge, step=lambda: self.loop.step)
        self.loop = VerlLoop(
            build_run(
                config,
                out_dir=out_dir,
                cache_dir=out_dir,
                sink=self.sink,
                backend=self.policy,
                inputs=RunInputs(train=questions(16), eval_sets={}),
            )
        )
        self.data_rng = random.Random(1)

    def merge(self, actor: Path, target: Path) -> None:
        self.merged.append((actor, target))
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}", encoding="utf-8")

    def batch(self, step: int) -> DataProto:
        """What RayPPOTrainer.fit hands `_get_gen_batch`: one row per question with a fresh uid."""
        qs = self.data_rng.sample(questions(16), self.config.grpo.batch_size)
        return DataProto.from_single_dict(
            {
                "dummy_tensor": torch.zeros((len(qs), 1), dtype=torch.uint8),
                "raw_prompt": object_array([[{"role": "user", "content": q.text}] for q in qs]),
                "extra_info": object_array(
                    [
                        {"index": i, "question_id": q.id, "question": q.text, "golden_answers": list(q.golden_answers)}
                        for i, q in enumerate(qs)
                    ]
                ),
                "data_source": object_array(["train"] * len(qs)),
                "uid": object_array([f"s{step}-{i}" for i in range(len(qs))]),
            }
        )

    def step(self, step: int, rewards: Any = None) -> DataProto:
        """One training step: inject, repeat G times (as fit does), score, shuffle (balance_batch), record."""
        (self.out_dir / "verl" / f"global_step_{step}" / "actor").mkdir(parents=True, exist_ok=True)
        batch = self.batch(step)
        self.loop.begin_step(step, batch.non_tensor_batch)
        rolled = batch.repeat(repeat_times=G, interleave=True)
        fields = rolled.non_tensor_batch
        scores = rewards(fields) if rewards else [float(i % 2) for i in range(len(rolled))]
        order = np.random.default_rng(step).permutation(len(rolled))
        shuffled = {k: v[order] for k, v in fields.items()}
        self.loop.end_step(step, shuffled, [scores[i] for i in order], {"actor/kl_loss": [0.1], "actor/lr": 1e-6})
        return rolled


def test_each_question_gets_one_sampled_instruction_placed_before_it_in_the_user_turn(tmp_path: Path) -> None:
    h = Harness(paper_like(), tmp_path)
    h.loop.start()
    trainer = object.__new__(InspoRayPPOTrainer)
    trainer.attach(h.loop, state=lambda step: None)
    trainer.global_steps = 1
    batch = h.batch(1)
    gen = trainer._get_gen_batch(batch)  # verl's own split of the batch, after our injection

    members = {m.id: m.text for m in h.loop.population.members}
    assert len(members) == 7  # seed + 6 paraphrases from the optimizer
    ids = list(gen.non_tensor_batch[INSTRUCTION_ID])
    questions_asked = [info["question"] for info in gen.non_tensor_batch["extra_info"]]
    for prompt, instruction_id, question in zip(gen.non_tensor_batch["raw_prompt"], ids, questions_asked, strict=True):
        assert prompt == chat_messages(members[instruction_id], question, "user")
        assert prompt[0]["content"].startswith(members[instruction_id] + "\nQuestion: ")
    assert set(batch.non_tensor_batch) >= {"uid", "extra_info", "data_source"}  # kept for the reward and the update
    rolled = gen.repeat(repeat_times=G, interleave=True)
    assert list(rolled.non_tensor_batch[INSTRUCTION_ID]) == [i for i in ids for _ in range(G)]

    again = Harness(paper_like(), tmp_path / "again")
    again.loop.start()
    replay = again.batch(1)
    again.loop.begin_step(1, replay.non_tensor_batch)
    assert list(replay.non_tensor_batch[INSTRUCTION_ID]) == ids  # same seed → same instruction samples


def test_group_mean_rewards_go_to_the_instruction_of_each_uid(tmp_path: Path) -> None:
    h = Harness(paper_like(population_size=3), tmp_path)
    h.loop.start()

    def rewards(fields: dict[str, np.ndarray]) -> list[float]:
        return [1.0 if ins == "ins-0000" else 0.25 * (k % 2) for k, ins in enumerate(fields[INSTRUCTION_ID])]

    rolled = h.step(1, rewards)
    used = set(rolled.non_tensor_batch[INSTRUCTION_ID])
    recorded = {ins.id: ins.rewards for ins in h.loop.population.members if ins.rewards}
    assert set(recorded) == used
    for ins_id, history in recorded.items():
        assert history == [(1, 1.0 if ins_id == "ins-0000" else 0.125)]
    step = h.sink.of(StepCompleted)[-1]
    assert step.step == 1 and step.metrics["kl"] == pytest.approx(0.1) and step.metrics["lr"] == 1e-6
    assert len(h.loop.replay) == 4 * G and step.overhead.training_rollouts == 4 * G
    assert h.sink.of(PopulationChanged)[-1].reason == "step"


def test_prune_and_evolution_run_after_the_papers_steps_with_verification_on_the_current_policy(
    tmp_path: Path,
) -> None:
    h = Harness(paper_like(), tmp_path)
    h.loop.start()
    marks: list[tuple[str, int]] = []
    for step in range(1, 32):
        generations = len(h.manager.batches)
        h.step(step)
        marks.append(("step", step))
        if len(h.manager.batches) > generations:
            marks.append(("verified before", step))
    pruned_at = sorted({e.step for e in h.sink.of(InstructionPruned)})
    evolved_at = [e.step for e in h.sink.of(EvolutionCompleted)]
    assert evolved_at == [15, 30]
    assert pruned_at and set(pruned_at) <= {5, 10, 15, 20, 25, 30}
    assert 5 in pruned_at  # 7 → 4 at the first K_p
    # the boundary of step t runs when step t+1 begins: after the update of step t, before its rollouts
    assert ("verified before", 16) in marks and ("verified before", 31) in marks
    verified = h.sink.of(InstructionVerified)
    assert verified and {v.step for v in verified} == {15, 30} and all(v.n_questions == 6 for v in verified)
    batch = h.manager.batches[0]
    assert batch.meta_info["validate"] is True and len(batch) % 4 == 0
    assert set(batch.non_tensor_batch["agent_name"]) == {AGENT_NAME}
    assert len(h.loop.population) <= 7


def test_checkpoints_hold_the_merged_policy_and_the_population_and_restore_it(tmp_path: Path) -> None:
    config = paper_like(**{"checkpoint.checkpoint_every": 5, "checkpoint.keep_last": 1})
    h = Harness(config, tmp_path)
    h.loop.start()
    for step in range(1, 11):
        h.step(step)
    h.loop.run_boundary()
    saved = h.sink.of(CheckpointSaved)
    assert [e.step for e in saved] == [5, 10]
    newest = tmp_path / "checkpoints" / "step-000010"
    assert (newest / "policy" / "config.json").is_file() and not (tmp_path / "checkpoints" / "step-000005").exists()
    assert h.merged[-1][0] == tmp_path / "verl" / "global_step_10" / "actor"

    sink = ListSink()
    resumed = Harness(config, tmp_path, sink)
    resumed.loop.start(checkpoint_state(tmp_path, 10))
    assert sink.of(RunStarted)[0].resumed_from_step == 10
    assert resumed.loop.population.to_state() == h.loop.population.to_state()
    assert len(resumed.loop.replay) == len(h.loop.replay)
    nxt, other = h.batch(11), resumed.batch(11)
    h.loop.begin_step(11, nxt.non_tensor_batch)
    resumed.loop.begin_step(11, other.non_tensor_batch)
    assert list(other.non_tensor_batch[INSTRUCTION_ID]) == list(nxt.non_tensor_batch[INSTRUCTION_ID])
    with pytest.raises(FileNotFoundError, match="step-000007"):
        checkpoint_state(tmp_path, 7)


def test_validation_metrics_become_evaluations_of_the_best_instruction(tmp_path: Path) -> None:
    h = Harness(paper_like(), tmp_path)
    h.loop.start()
    fields = h.batch(1).non_tensor_batch
    best = h.loop.inject_best(fields)
    assert {instruction_of(p) for p in fields["raw_prompt"]} == {best.text}
    metrics = {"val-core/nq/reward/mean@1": 0.42, "val-core/hotpotqa/reward/mean@1": 0.3, "val-aux/x": 1.0}
    h.loop.evaluated(100, metrics, {"nq": 50, "hotpotqa": 20}, best.id)
    evals = {e.benchmark: e for e in h.sink.of(EvalCompleted)}
    assert evals["nq"].value == 0.42 and evals["nq"].n == 50 and evals["hotpotqa"].instruction_id == best.id


def test_validation_keeps_each_questions_result_once_and_the_evaluation_pairs_on_them(tmp_path: Path) -> None:
    from inspo_engine.backends.verl.loop import data_source_counts
    from inspo_engine.coevolution import evaluation_file, read_answers

    h = Harness(paper_like(), tmp_path)
    h.loop.start()
    batch = h.batch(1)
    fields = batch.non_tensor_batch
    fields["data_source"] = object_array(["nq", "nq", "hotpotqa", "nq"][: len(batch)])
    fields["reward_model"] = object_array(
        [{"style": "rule", "ground_truth": {"target": info["golden_answers"]}} for info in fields["extra_info"]]
    )
    best = h.loop.inject_best(fields)
    assert instruction_of(fields["raw_prompt"][0]).count("search") >= 4  # the fake's reward 1: the gold answer
    fields["raw_prompt"][1] = [{"role": "system", "content": "Answer."}, *fields["raw_prompt"][1][1:]]  # reward 0
    padded = DataProto.concat([batch, batch[:2]])  # verl pads to the workers' divisor with copies of first rows
    recorder = ValidationRecorder(h.manager, lambda done, source: h.loop.evaluating(100, done, 4, source))
    h.loop.evaluating(100, 0, 4)
    recorder.generate_sequences(padded)
    # the run page's progress: as it starts, then after the batch, its padding not counted twice
    progress = [(e.step, e.done, e.total) for e in h.sink.of(EvalProgress)]
    assert progress == [(100, 0, 4), (100, len(batch), 4)] and len(batch) == 4
    ids = [info["question_id"] for info in fields["extra_info"]]
    assert [r.question_id for r in recorder.results["nq"]] == [ids[0], ids[1], ids[3]]
    assert [r.question_id for r in recorder.results["hotpotqa"]] == [ids[2]]
    first = recorder.results["nq"][0]
    assert (first.em, first.f1, first.answer) == (1.0, 1.0, fields["extra_info"][0]["golden_answers"][0])
    assert recorder.batches is h.manager.batches  # anything else reaches verl's manager

    h.loop.evaluated(100, {}, data_source_counts(fields), best.id, answers=recorder.results)
    evals = {e.benchmark: e for e in h.sink.of(EvalCompleted)}
    assert evals["nq"].value == pytest.approx(2 / 3) and evals["nq"].n == 3 and evals["nq"].f1 == pytest.approx(2 / 3)
    assert [a["em"] for a in evals["nq"].answers] == [1.0, 0.0, 1.0] and evals["hotpotqa"].value == 1.0
    assert [a["question_id"] for a in evals["nq"].answers] == [ids[0], ids[1], ids[3]]
    assert read_answers(evaluation_file(tmp_path, 100, "nq")) == evals["nq"].answers


def test_a_stopped_run_finishes_cancelled_with_a_checkpoint(tmp_path: Path) -> None:
    h = Harness(paper_like(), tmp_path)
    h.loop.start()
    h.step(1)
    result = h.loop.finish("cancelled")
    assert result.status == "cancelled" and h.sink.of(RunFinished)[-1].status == "cancelled"
    assert (
        json.loads((tmp_path / "checkpoints" / "step-000001" / "inspo_state.json").read_text())["progress"]["step"] == 1
    )


@pytest.mark.parametrize("mode", ["pre", "post"])
def test_modes_that_freeze_the_policy_are_refused(mode: str, tmp_path: Path) -> None:
    with pytest.raises(UnsupportedMode, match="torch backend"):
        Harness(paper_like(mode=mode), tmp_path)


def test_verification_scores_each_question_greedily_with_the_candidate_as_its_instruction(tmp_path: Path) -> None:
    h = Harness(paper_like(), tmp_path)
    h.loop.start()
    scores = h.policy.score("search search search search", questions(5))
    assert scores == [1.0] * 5
    batch = h.manager.batches[-1]
    assert len(batch) == 8  # padded to the 4 agent-loop workers, then unpadded
    assert instruction_of(batch.non_tensor_batch["raw_prompt"][0]) == "search search search search"
    assert batch.non_tensor_batch["reward_model"][1]["ground_truth"]["target"] == ["answer 1"]
    results = h.policy.evaluate("search search search search", questions(5))
    expected = [(f"q{i}", 1.0, 1.0, f"answer {i}") for i in range(5)]
    assert [(r.question_id, r.em, r.f1, r.answer) for r in results] == expected


def test_system_placement_puts_the_instruction_in_the_system_message(tmp_path: Path) -> None:
    h = Harness(paper_like(**{"env.instruction_placement": "system"}), tmp_path)
    h.policy.placement = "system"
    h.loop.start()
    fields = h.batch(1).non_tensor_batch
    h.loop.begin_step(1, fields)
    members = {m.id: m.text for m in h.loop.population.members}
    for prompt, instruction_id in zip(fields["raw_prompt"], fields[INSTRUCTION_ID], strict=True):
        assert prompt[0] == {"role": "system", "content": members[instruction_id]}
        assert prompt[1]["role"] == "user" and not prompt[1]["content"].startswith(members[instruction_id])
    h.policy.score("search", questions(2))
    assert h.manager.batches[-1].non_tensor_batch["raw_prompt"][0][0] == {"role": "system", "content": "search"}
