"""The run config as verl's Hydra overrides (App. B of the paper for the `paper` preset); it imports no verl.

Every key without a `+` exists in verl 0.9.1's `ppo_trainer.yaml` (a test composes them against it); keys under
`+inspo.` are ours: what the agent loop and the trainer read that verl has no field for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ...config import LOSS_AGGREGATION, GRPOConfig, RunConfig, TrackingConfig, loss_norm_tokens, reward_scaling
from .turns import response_length_for

AGENT_NAME = "inspo_search_r1"
"""The name the agent loop registers under; datasets and the trainer put it in `agent_name`."""

ADVANTAGE_ESTIMATOR = "inspo_grpo"
"""The name `advantage.py` registers its GRPO estimator under (verl's `grpo` with all-equal groups decided by
equality); the trainer imports that module, so the name is known where verl computes advantages."""

MODEL_SIZES: dict[str, dict[str, Any]] = {
    "3b": {"backend.model": "Qwen/Qwen2.5-3B", "grpo.lr": 5e-7, "env.max_turns": 4},
    "7b": {"backend.model": "Qwen/Qwen2.5-7B", "grpo.lr": 3e-7, "env.max_turns": 6},
}
"""The paper's two policies (App. B): the base model, its learning rate and its turn limit."""


@dataclass(frozen=True)
class Cluster:
    """The GPUs a verl run gets."""

    n_gpus_per_node: int = 8
    """GPUs per node (the paper: 8 × H100)."""
    nnodes: int = 1
    """Nodes of the Ray cluster."""
    tensor_parallel: int = 1
    """vLLM tensor parallelism per rollout replica (1 fits Qwen2.5-3B/7B on an 80 GB GPU)."""
    gpu_memory_utilization: float = 0.6
    """Share of GPU memory vLLM may take while rolling out."""

    @property
    def n_gpus(self) -> int:
        return self.n_gpus_per_node * self.nnodes


@dataclass(frozen=True)
class RunPaths:
    """Where one run's files are: data written by the launcher, verl's checkpoints, the engine's files."""

    train_files: str
    val_files: str
    verl_dir: str
    """verl's own checkpoints (`trainer.default_local_dir`)."""
    out_dir: str
    """The run directory: events.jsonl, checkpoints/step-NNNNNN/{policy, inspo_state.json}, best_instruction.txt."""
    run_config: str
    """The RunConfig JSON the trainer builds its population from."""
    retriever_url: str
    """A Search-R1 `/retrieve` server."""


def verl_overrides(
    config: RunConfig, *, cluster: Cluster | None = None, paths: RunPaths | None = None, experiment: str = "inspo"
) -> list[str]:
    """`key=value` overrides for `verl.trainer.main_ppo`'s config, from the run config.

    Micro-batches: verl counts them in trajectories per GPU, as Search-R1's configuration did; the paper's
    micro-batch of 64 is read the same way (64 trajectories per forward/backward across the cluster).
    """
    cluster = cluster or Cluster()
    return [f"{key}={_value(value)}" for key, value in _pairs(config, cluster, paths, experiment)]


def _pairs(config: RunConfig, cluster: Cluster, paths: RunPaths | None, experiment: str) -> list[tuple[str, Any]]:
    grpo, env, evaluation = config.grpo, config.env, config.eval
    per_gpu = max(1, grpo.micro_batch_size // cluster.n_gpus)
    response = response_length_for(
        env.max_turns, min(env.max_turn_tokens, config.backend.max_new_tokens), env.max_obs_tokens
    )
    actor, rollout = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    pairs: list[tuple[str, Any]] = [
        ("algorithm.adv_estimator", ADVANTAGE_ESTIMATOR),
        ("algorithm.use_kl_in_reward", False),
        ("data.train_batch_size", grpo.batch_size),
        ("data.max_prompt_length", env.max_prompt_length),
        ("data.max_response_length", response),
        ("data.return_raw_chat", True),
        ("data.shuffle", True),
        ("data.seed", config.seed),
        ("actor_rollout_ref.model.path", config.backend.model),
        ("actor_rollout_ref.model.use_remove_padding", True),
        ("actor_rollout_ref.model.enable_gradient_checkpointing", grpo.gradient_checkpointing),
        ("actor_rollout_ref.model.lora_rank", grpo.lora_rank if grpo.use_lora else 0),
        ("actor_rollout_ref.model.lora_alpha", _alpha(grpo)),
        ("actor_rollout_ref.model.target_modules", _targets(grpo.lora_targets)),
        (f"{actor}.optim.lr", grpo.lr),
        (f"{actor}.optim.lr_warmup_steps_ratio", grpo.warmup_ratio),
        (f"{actor}.optim.lr_scheduler_type", "cosine"),
        (f"{actor}.grad_clip", grpo.max_grad_norm),
        (f"{actor}.ppo_mini_batch_size", grpo.mini_batch_size),
        (f"{actor}.ppo_micro_batch_size_per_gpu", per_gpu),
        (f"{actor}.ppo_epochs", 1),
        (f"{actor}.use_kl_loss", grpo.kl_coef > 0),  # no KL: verl builds no reference worker (need_reference_policy)
        (f"{actor}.kl_loss_coef", grpo.kl_coef),
        (f"{actor}.kl_loss_type", "low_var_kl"),
        (f"{actor}.entropy_coeff", 0),
        ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", per_gpu),
        (f"{rollout}.name", "vllm"),
        (f"{rollout}.n", grpo.group_size),
        (f"{rollout}.temperature", grpo.sampling_temperature),
        (f"{rollout}.top_p", grpo.top_p),
        (f"{rollout}.val_kwargs.temperature", 0),
        (f"{rollout}.val_kwargs.do_sample", False),
        (f"{rollout}.log_prob_micro_batch_size_per_gpu", per_gpu),
        (f"{rollout}.tensor_model_parallel_size", cluster.tensor_parallel),
        (f"{rollout}.gpu_memory_utilization", cluster.gpu_memory_utilization),
        (f"{rollout}.multi_turn.enable", True),
        (f"{rollout}.multi_turn.max_assistant_turns", env.max_turns),
        (f"{rollout}.multi_turn.max_tool_response_length", env.max_obs_tokens),
        (f"{rollout}.agent.default_agent_loop", AGENT_NAME),
        ("trainer.use_v1", False),
        ("trainer.total_training_steps", grpo.total_steps),
        ("trainer.total_epochs", 1000),
        ("trainer.test_freq", evaluation.eval_every or grpo.total_steps),
        ("trainer.val_before_train", evaluation.eval_at_start),
        ("trainer.save_freq", config.checkpoint.checkpoint_every or grpo.total_steps),
        ("trainer.max_actor_ckpt_to_keep", config.checkpoint.keep_last or None),
        ("trainer.critic_warmup", 0),
        ("trainer.n_gpus_per_node", cluster.n_gpus_per_node),
        ("trainer.nnodes", cluster.nnodes),
        ("trainer.logger", verl_loggers(config.tracking)),  # verl's own metrics (verl/tracking.py)
        ("trainer.project_name", config.tracking.project),
        ("trainer.experiment_name", experiment),
        ("trainer.resume_mode", "disable"),
        ("+inspo.max_turn_tokens", min(env.max_turn_tokens, config.backend.max_new_tokens)),
        ("+inspo.top_k", env.top_k),
        ("+inspo.reward", env.reward),
        ("+inspo.format_score", env.format_score),
        ("+inspo.retrieval_score", env.retrieval_score),
        ("+inspo.answer_score", env.answer_score),
        ("+inspo.format_requires_search", env.format_requires_search),
        ("+inspo.f1_score", env.f1_score),
    ]
    pairs += loss_pairs(config)
    if paths is not None:
        pairs += [
            ("data.train_files", paths.train_files),
            ("data.val_files", paths.val_files),
            ("trainer.default_local_dir", paths.verl_dir),
            ("+inspo.retriever_url", paths.retriever_url),
            ("+inspo.run_config", paths.run_config),
            ("+inspo.out_dir", paths.out_dir),
        ]
    return pairs


def loss_pairs(config: RunConfig) -> list[tuple[str, Any]]:
    """`grpo.loss` and its settings as verl 0.9.1's own keys (docs/losses.md): the aggregation
    (`loss_agg_mode`, with dr_grpo's constant as `loss_scale_factor`), the ratio (`policy_loss.loss_mode` gspo for
    GSPO's sequence-level ratio), the clip range and whether advantages are divided by the group's std. What verl
    cannot do (`scale_rewards` 'batch', `drop_truncated`) config validation refuses for this backend."""
    grpo, actor = config.grpo, "actor_rollout_ref.actor"
    clip_high = grpo.clip_ratio if grpo.clip_ratio_high is None else grpo.clip_ratio_high
    return [
        ("algorithm.norm_adv_by_std_in_grpo", reward_scaling(grpo) == "group"),
        (f"{actor}.policy_loss.loss_mode", "gspo" if grpo.loss == "gspo" else "vanilla"),
        (f"{actor}.loss_agg_mode", LOSS_AGGREGATION[grpo.loss]),
        (f"{actor}.loss_scale_factor", loss_norm_tokens(config) if grpo.loss == "dr_grpo" else None),
        (f"{actor}.clip_ratio", grpo.clip_ratio),
        (f"{actor}.clip_ratio_low", grpo.clip_ratio),
        (f"{actor}.clip_ratio_high", clip_high),
    ]


_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_\-./]*")


def _value(value: Any) -> str:
    """A value in Hydra's override grammar: strings that are not plain names are quoted.

    >>> _value(True), _value(5e-07), _value("vllm"), _value("http://h:8000"), _value(None), _value(["console"])
    ('true', '5e-07', 'vllm', "'http://h:8000'", 'null', '[console]')
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(_value(v) for v in value) + "]"
    text = str(value)
    return text if _BARE.fullmatch(text) and text not in ("true", "false", "null") else quote(text)


def quote(text: str) -> str:
    r"""`text` as a quoted Hydra value: quotes and a trailing backslash cannot end the string early. A '${' is
    refused (ValueError), not escaped: an escaped '\${' becomes a live interpolation again once the job runs
    `OmegaConf.resolve`, and `${oc.env:…}` would read the job's environment. Configs refuse '$' already.

    >>> print(quote("/data/it's"), quote("end\\"))
    '/data/it\'s' 'end\\'
    """
    if "${" in text:
        raise ValueError(f"{text!r} would be an interpolation in verl's config; '${{' is not allowed")
    return "'" + re.sub(r"(\\*)('|\Z)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), text) + "'"


def describe(overrides: list[str]) -> str:
    """Overrides one per line, as a shell continuation, for `python -m inspo_engine verl-config`."""
    return " \\\n".join(overrides)


def _alpha(grpo: GRPOConfig) -> int:
    """verl's lora_alpha: the config's, or 2 × rank as the torch backend takes it (verl's own default is 16)."""
    return grpo.lora_alpha if grpo.lora_alpha is not None else 2 * grpo.lora_rank


def _targets(targets: list[str]) -> str | list[str]:
    """LoRA's target modules as verl's `model.target_modules` takes them: 'all-linear' as the string, else a list.

    >>> _targets(["all-linear"]), _targets(["q_proj", "v_proj"])
    ('all-linear', ['q_proj', 'v_proj'])
    """
    return targets[0] if targets == ["all-linear"] else list(targets)


def verl_loggers(tracking: TrackingConfig) -> list[str]:
    """verl's own trackers: the run's, except MLflow on a server, which MLflow's own client would reach with
    requests that follow redirects past the network policy; the engine's events reach that server through
    `inspo_engine.tracking.MlflowRestTracker`, and verl's metrics go to TensorBoard or W&B when they are named.

    >>> verl_loggers(TrackingConfig(backends=["mlflow", "tensorboard"], mlflow_uri="https://m.example"))
    ['console', 'tensorboard']
    >>> verl_loggers(TrackingConfig(backends=["mlflow"]))
    ['console', 'mlflow']
    """
    served = tracking.mlflow_uri is not None
    return ["console", *(name for name in tracking.backends if not (served and name == "mlflow"))]
