"""What a run's step records beside its reward: exact match, and the reward split into its format and correctness
parts; and the evaluation of the untrained policy a run can start with (#45 item 1)."""

import pytest

from inspo_engine.coevolution import CoEvolution
from inspo_engine.config import RunConfig
from inspo_engine.env.rewards import em_format_parts, em_format_reward, em_parts
from inspo_engine.events import EvalCompleted, ListSink, StepCompleted
from inspo_engine.presets import preset

from .fakes import ScriptedBackend, questions

STATIC = {
    "seed": 1,
    "mode": "static",
    "grpo": {"total_steps": 3, "group_size": 4, "batch_size": 8, "mini_batch_size": 8, "micro_batch_size": 8},
    "evolution": {"evolve_until": 3},
    "population": {"diversity": False},
    "env": {"reward": "em_format", "format_score": 0.2, "retrieval_score": 0.0, "answer_score": 0.05},
}


class FormatAwareBackend(ScriptedBackend):
    """The scripted policy scored by the run's em_format reward, as a real backend scores its rollouts."""

    def _trajectory(self, instruction_id, instruction, question):
        trajectory = super()._trajectory(instruction_id, instruction, question)
        (trajectory.reward,) = em_format_reward(
            [trajectory.response],
            golden_answers=[question.golden_answers],
            answers=[trajectory.answer],
            retrieval_score=0.0,
            answer_score=0.05,
        )
        return trajectory


def run(overrides=None, eval_sets=None):
    config = RunConfig.from_dict(STATIC).with_overrides(overrides or {})
    sink = ListSink()
    CoEvolution(
        config,
        backend=FormatAwareBackend(seed=1),
        train_questions=questions(32),
        optimizer=None,
        sink=sink,
        eval_sets=eval_sets,
    ).run()
    return sink


@pytest.mark.parametrize(
    "completion, golds, expected",
    [
        ("<think>x</think><answer>Lima</answer>", ["Lima"], (0.2, 0.8)),
        ("<think>x</think><answer>Quito</answer>", ["Lima"], (0.2, 0.0)),
        ("<answer>Lima</answer> and more", ["Lima"], (0.0, 0.8)),
        ("I say <answer>Quito</answer>", ["Lima"], (0.05, 0.0)),
        ("no answer", ["Lima"], (0.0, 0.0)),
    ],
)
def test_the_format_and_correctness_parts_add_up_to_the_em_format_reward(completion, golds, expected):
    kwargs = {"golden_answers": [golds], "answer_score": 0.05, "retrieval_score": 0.0}
    (parts,) = em_format_parts([completion], **kwargs)
    assert (parts.format, parts.correct) == pytest.approx(expected)
    assert parts.format + parts.correct == pytest.approx(em_format_reward([completion], **kwargs)[0])


def test_plain_exact_match_is_all_correctness():
    assert em_parts(["<answer>Lima</answer>", "Lima"], golden_answers=[["Lima"], ["Lima"]]) == [(0.0, 1.0), (0.0, 0.0)]


def test_every_step_records_its_exact_match_and_the_two_parts_of_its_reward():
    steps = run().of(StepCompleted)
    assert len(steps) == 3
    for step in steps:
        metrics = step.metrics
        assert metrics["reward_format"] + metrics["reward_correct"] == pytest.approx(step.reward_mean)
        # The scripted policy answers right in well-formed replies only: each right one earns 1 − 0.2 for being
        # right, so correctness is 0.8 × EM.
        assert metrics["reward_correct"] == pytest.approx(0.8 * metrics["em"])
    assert any(0 < s.metrics["em"] < 1 for s in steps)


def test_eval_at_start_scores_the_untrained_policy_as_step_0_before_training():
    held_out = {"builtin": questions(40)[-8:]}
    evaluations = run({"eval.eval_at_start": True}, held_out).of(EvalCompleted)
    assert [e.step for e in evaluations] == [0, 3]
    assert [a["question_id"] for a in evaluations[0].answers] == [a["question_id"] for a in evaluations[1].answers]
    assert [e.step for e in run({}, held_out).of(EvalCompleted)] == [3]


def test_the_first_run_preset_evaluates_the_untrained_policy_first():
    assert preset("quick").eval.eval_at_start and not RunConfig().eval.eval_at_start
