"""The paper preset as verl overrides: App. B's numbers, every key present in verl 0.9.1's ppo_trainer.yaml, and
the `verl-config` command that prints them."""

from __future__ import annotations

import dataclasses

import pytest

from tests.engine.verl._support import require_verl

require_verl()

from hydra.errors import ConfigCompositionException  # noqa: E402

from inspo_engine.backends.verl.config import compose  # noqa: E402
from inspo_engine.backends.verl.overrides import MODEL_SIZES, RunPaths, verl_overrides  # noqa: E402
from inspo_engine.cli import main  # noqa: E402
from inspo_engine.presets import preset  # noqa: E402

PATHS = RunPaths("/d/train.parquet", "/d/val.parquet", "/r/verl", "/r", "/r/config.json", "http://127.0.0.1:8000")


@pytest.fixture(scope="module")
def paper() -> object:
    return compose(verl_overrides(preset("paper"), paths=PATHS))


def test_the_paper_numbers_reach_verl(paper) -> None:
    actor, rollout = paper.actor_rollout_ref.actor, paper.actor_rollout_ref.rollout
    assert paper.data.train_batch_size == 512 and rollout.n == 5
    assert actor.ppo_mini_batch_size == 256 and actor.ppo_micro_batch_size_per_gpu * 8 == 64
    assert actor.optim.lr == 5e-7 and actor.optim.lr_warmup_steps_ratio == 0.1
    assert actor.optim.lr_scheduler_type == "cosine"
    assert actor.use_kl_loss and actor.kl_loss_coef == 0.001 and actor.kl_loss_type == "low_var_kl"
    assert actor.clip_ratio == actor.clip_ratio_low == actor.clip_ratio_high == 0.2
    assert paper.algorithm.adv_estimator == "inspo_grpo" and not paper.algorithm.use_kl_in_reward
    assert paper.data.max_prompt_length == 4096 and rollout.prompt_length == 4096
    assert rollout.multi_turn.max_assistant_turns == 4 and rollout.multi_turn.max_tool_response_length == 500
    assert paper.inspo.max_turn_tokens == 500 and paper.inspo.top_k == 3
    assert rollout.response_length == 5 * 500 + 4 * 500  # 4 searching turns + the final one, 4 observations
    assert rollout.temperature == 1.0 and rollout.top_p == 1.0 and rollout.name == "vllm"
    assert paper.trainer.total_training_steps == 300 and paper.trainer.test_freq == 100
    assert paper.trainer.use_v1 is False and rollout.agent.default_agent_loop == "inspo_search_r1"
    assert paper.data.train_files == "/d/train.parquet" and paper.inspo.retriever_url == "http://127.0.0.1:8000"


def test_the_7b_policy_gets_its_learning_rate_and_six_turns() -> None:
    config = compose(verl_overrides(preset("paper").with_overrides(MODEL_SIZES["7b"])))
    assert config.actor_rollout_ref.actor.optim.lr == 3e-7
    assert config.actor_rollout_ref.rollout.multi_turn.max_assistant_turns == 6
    assert config.actor_rollout_ref.model.path == "Qwen/Qwen2.5-7B"
    assert config.data.max_response_length == 7 * 500 + 6 * 500


def test_every_plain_key_exists_in_verls_yaml() -> None:
    """Hydra refuses to override a key the yaml lacks; ours go under `+inspo.` and must not exist in verl's."""
    overrides = verl_overrides(preset("paper"), paths=PATHS)
    assert all(o.split("=", 1)[0].startswith("+inspo.") for o in overrides if o.startswith("+"))
    compose([o for o in overrides if not o.startswith("+")])  # raises on any unknown key
    with pytest.raises(ConfigCompositionException):
        compose(["trainer.no_such_key=1"])
    with pytest.raises(ConfigCompositionException):
        compose([o.lstrip("+") for o in overrides if o.startswith("+")])


def test_verl_config_prints_the_overrides(capsys) -> None:
    assert main(["verl-config", "--preset", "paper"]) == 0
    out = capsys.readouterr().out
    lines = [line.rstrip(" \\") for line in out.strip().splitlines()]
    assert "actor_rollout_ref.actor.optim.lr=5e-07" in lines and "actor_rollout_ref.rollout.n=5" in lines
    assert main(["verl-config", "--preset", "paper", "--model-size", "7b"]) == 0
    assert "actor_rollout_ref.actor.optim.lr=3e-07" in capsys.readouterr().out


def test_a_loss_without_kl_builds_no_reference_worker_in_verl() -> None:
    from verl.trainer.ppo.utils import need_reference_policy

    config = compose(verl_overrides(preset("paper").with_overrides({"grpo.kl_coef": 0.0}), paths=PATHS))
    assert not config.actor_rollout_ref.actor.use_kl_loss and not need_reference_policy(config)
    with_kl = compose(verl_overrides(preset("paper"), paths=PATHS))
    assert need_reference_policy(with_kl)


def test_every_lora_field_reaches_verls_model_config() -> None:
    from verl.workers.config.model import HFModelConfig

    lora = {
        "grpo.use_lora": True,
        "grpo.lora_rank": 32,
        "grpo.lora_alpha": 16,
        "grpo.lora_targets": ["q_proj", "v_proj"],
    }
    model = compose(verl_overrides(preset("paper").with_overrides(lora), paths=PATHS)).actor_rollout_ref.model
    assert (model.lora_rank, model.lora_alpha, list(model.target_modules)) == (32, 16, ["q_proj", "v_proj"])
    assert {"lora_rank", "lora_alpha", "target_modules"} <= {f.name for f in dataclasses.fields(HFModelConfig)}
    default = compose(verl_overrides(preset("paper").with_overrides({"grpo.use_lora": True}), paths=PATHS))
    assert (
        default.actor_rollout_ref.model.lora_alpha == 32
        and default.actor_rollout_ref.model.target_modules == "all-linear"
    )


def test_gradient_checkpointing_reaches_verls_model_config() -> None:
    from verl.workers.config.model import HFModelConfig

    assert "enable_gradient_checkpointing" in {f.name for f in dataclasses.fields(HFModelConfig)}
    on = compose(verl_overrides(preset("paper"), paths=PATHS)).actor_rollout_ref.model
    off_config = preset("paper").with_overrides({"grpo.gradient_checkpointing": False})
    off = compose(verl_overrides(off_config, paths=PATHS)).actor_rollout_ref.model
    assert on.enable_gradient_checkpointing is True and off.enable_gradient_checkpointing is False
