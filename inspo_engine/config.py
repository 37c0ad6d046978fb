"""Run configuration: typed sections, the paper's defaults, presets, validation, JSON round trip; no other I/O."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from .config_fields import (
    ConfigError,
    FieldError,
    bounded,
    bounds_errors,
    build,
    leaf_paths,
    string_fields,
)

SCHEMA_VERSION = 1

SEED_INSTRUCTION = (
    "Answer the question below. Think step by step inside <think> and </think> every time you receive new "
    "information. If you are missing knowledge, search by writing <search> your query </search>; the search "
    "engine returns the top passages between <information> and </information>. You may search as many times "
    "as you need. When you are confident, give only the final short answer inside <answer> and </answer>, "
    "for example <answer> Paris </answer>."
)

PAPER_BENCHMARKS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")

Mode = Literal["online", "static", "pre", "post", "random-pool"]
Reward = Literal["em", "em_format"]
Placement = Literal["user", "system"]
Proposer = Literal["reflection", "paraphrase", "history"]
WeightReset = Literal["all", "new"]
OptimizerRetention = Literal["latest", "all"]
GRPOLoss = Literal["grpo", "dr_grpo", "dapo", "gspo"]
RewardScaling = Literal["group", "batch", "none"]


MAX_CHECKPOINTS = 100
"""The most checkpoints a run may keep on disk: keep_last, or with keep_last = 0 every checkpoint it writes."""


@dataclass
class GRPOConfig:
    """Policy optimisation (GRPO) and the training schedule. Defaults: the paper's App. B."""

    total_steps: int = bounded(300, 1, 1_000_000)
    """T: training steps."""
    group_size: int = bounded(5, 2, 64)
    """G: rollouts per (instruction, question) pair; advantages are normalised within the group."""
    batch_size: int = bounded(512, 1, 8192)
    """Questions per training step (each gets G rollouts)."""
    mini_batch_size: int = bounded(256, 1, 8192)
    """Questions per optimizer update; batch_size / mini_batch_size updates per step."""
    micro_batch_size: int = bounded(64, 1, 8192)
    """Questions per forward/backward pass; gradients accumulate up to the mini-batch."""
    lr: float = bounded(5e-7, 0, 1, inclusive=False)
    """Learning rate (5e-7 for Qwen2.5-3B-base, 3e-7 for 7B-base)."""
    warmup_ratio: float = bounded(0.1, 0, 1)
    """Fraction of total_steps with linear warm-up before the cosine decay."""
    kl_coef: float = bounded(0.001, 0, 10)
    """β: weight of the low-variance (k3) KL penalty to the frozen reference policy."""
    clip_ratio: float = bounded(0.2, 0, 1, inclusive=False)
    """ε: PPO-style clip on the token-level importance ratio."""
    max_grad_norm: float = bounded(1.0, 0, 1000, inclusive=False)
    """Gradient clipping norm."""
    sampling_temperature: float = bounded(1.0, 0, 10, inclusive=False)
    """Policy sampling temperature during rollouts."""
    top_p: float = bounded(1.0, 0, 1, inclusive=False)
    """Nucleus sampling during rollouts."""
    use_lora: bool = False
    """Train LoRA adapters (peft) instead of all weights."""
    lora_rank: int = bounded(16, 1, 1024)
    """LoRA rank when use_lora is on."""
    lora_alpha: int | None = bounded(None, 1, 65_536)
    """LoRA's scale numerator (the adapters' update is scaled by alpha / rank); None: 2 × lora_rank."""
    lora_dropout: float = bounded(0.0, 0, 1)
    """Dropout on the adapters' input during training (peft's lora_dropout); < 1."""
    lora_targets: list[str] = field(default_factory=lambda: ["all-linear"])
    """The modules that get adapters: peft module names (q_proj, v_proj, …) or 'all-linear' alone (every linear
    layer but the output head)."""
    gradient_checkpointing: bool = True
    """Run each decoder block again in backward instead of keeping its activations: less memory, more update time.
    LoRA frees the memory full fine-tuning spends on gradients and AdamW's moments, and turning this off spends some
    of it on speed (docs/benchmarks.md: on the cpu-demo's shapes a LoRA update took 0.57× full fine-tuning's time
    instead of 0.82×, at 2.8 GB of RSS instead of 1.9)."""
    rollout_correction: Literal["none", "tis"] = "none"
    """How the update corrects for rollouts sampled by other weights than the ones it scores them with (the bfloat16
    rollout copy of backend.precision 'bf16-mixed' or backend.rollout_dtype): 'none', or 'tis' (truncated
    importance sampling, as verl's rollout_is and TRL's vllm_importance_sampling_correction): every token's policy
    loss is multiplied by min(π_old / π_rollout, tis_cap), detached. The mismatch metrics (rollout_logp_abs_diff,
    rollout_kl, rollout_ratio_outside_clip) are logged whenever rollouts read a copy. Torch backend only."""
    tis_cap: float = bounded(2.0, 1, 100)
    """C of rollout_correction 'tis': the cap of the per-token weight (verl's rollout_is_threshold, TRL's
    vllm_importance_sampling_cap; 2.0 in both)."""
    drop_uniform_groups: bool = False
    """Leave out of the update every group whose G rollouts all scored the same: their advantages are all 0, so
    only the KL term would train on them (DAPO's dynamic sampling, without resampling). A step where every group is
    uniform makes no update. Torch backend only."""
    loss: GRPOLoss = "grpo"
    """The policy loss (docs/losses.md): grpo (DeepSeekMath eq. 3: token-level clipped ratio, mean over each reply's
    tokens, then over replies), dr_grpo (Dr. GRPO: each reply's token sum over a constant `norm_tokens`, rewards
    not scaled by the std), dapo (DAPO eq. 8: token-mean over the whole mini-batch; clip-higher through
    clip_ratio_high) or gspo (GSPO eq. 5–7: one length-normalised importance ratio per reply, clipped per reply)."""
    scale_rewards: RewardScaling | None = None
    """Divide each reply's advantage r − mean(group) by the std of its group, of the whole batch, or by nothing;
    None = the loss's own choice ('none' for dr_grpo, 'group' otherwise). 'batch' is torch backend only."""
    clip_ratio_high: float | None = bounded(None, 0, 10, inclusive=False)
    """ε_high: the upper clip of the importance ratio, 1 + ε_high (DAPO's clip-higher: 0.28 with ε = 0.2); None =
    clip_ratio, a symmetric clip."""
    drop_truncated: bool = False
    """DAPO's overlong filtering: replies whose last turn was cut by the token limit (or that filled the context)
    take no part in the loss; they still count in their group's advantages. Torch backend only."""
    norm_tokens: int = bounded(0, 0, 1_000_000)
    """dr_grpo's constant divisor of each reply's token sum; 0 = the most tokens the policy can write in one
    rollout, (env.max_turns + 1) × min(env.max_turn_tokens, backend.max_new_tokens)."""


LOSS_AGGREGATION: dict[str, str] = {
    "grpo": "seq-mean-token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
    "dapo": "token-mean",
    "gspo": "seq-mean-token-mean",
}
"""How each loss reduces its per-token terms to a scalar, named as verl's `loss_agg_mode` names them. A loss is its
name in `GRPOLoss`, its row here, and its per-token terms registered under that name in the torch backend
(`backends/torch/losses.py`, `register_policy_loss`); tests/engine/test_losses.py holds the three alike."""


def reward_scaling(grpo: GRPOConfig) -> RewardScaling:
    """`grpo.scale_rewards`, or the loss's own choice when it is None: Dr. GRPO drops the std, the others keep it.

    >>> [reward_scaling(GRPOConfig(loss="dr_grpo")), reward_scaling(GRPOConfig(loss="dapo"))]
    ['none', 'group']
    """
    if grpo.scale_rewards is not None:
        return grpo.scale_rewards
    return "none" if grpo.loss == "dr_grpo" else "group"


def loss_norm_tokens(config: RunConfig) -> int:
    """dr_grpo's divisor: `grpo.norm_tokens`, or the most tokens the policy writes in one rollout (every turn at its
    limit; `env.protocol.most_turns` counts max_turns + 1 turns).

    >>> loss_norm_tokens(RunConfig())
    2500
    """
    if config.grpo.norm_tokens:
        return config.grpo.norm_tokens
    return (config.env.max_turns + 1) * min(config.env.max_turn_tokens, config.backend.max_new_tokens)


@dataclass
class PopulationConfig:
    """The instruction population: size, importance weights, sampling and pruning."""

    population_size: int = bounded(7, 1, 64)
    """N_P: the most instructions alive at once."""
    n_parents: int = bounded(1, 1, 64)
    """N_parent: instructions kept as parents at evolution; pruning never goes below it."""
    temperature: float = bounded(0.2, 0, 100, inclusive=False)
    """τ_s: softmax temperature for sampling an instruction per question from its weight."""
    weight_window: int = bounded(5, 1, 1000)
    """n: the weight is the mean of per-step mean rewards over the last n steps the instruction was used."""
    prune: bool = True
    """Successive halving on (off = the constant-population ablation)."""
    prune_every: int = bounded(5, 1, 1_000_000)
    """K_p: prune after every K_p-th step."""
    seed_instruction: str = SEED_INSTRUCTION
    """The Search-R1-style instruction every population starts from."""
    initial_instructions: list[str] = field(default_factory=list)
    """Extra instructions supplied by the user (origin 'manual'); the rest are optimizer paraphrases."""
    paraphrase_init: bool = True
    """Fill the initial population to population_size with optimizer paraphrases of the seed."""
    diversity: bool = True
    """Measure how alike the living instructions are at every population record (all-MiniLM-L6-v2 embeddings, the
    dense retriever's model, loaded once per process) and raise the collapse alarm (see `diversity`)."""
    strategy_cosine: float = bounded(0.9, 0, 1, inclusive=False)
    """Two instructions are one strategy when their embeddings' cosine is at least this; distinct strategies are
    the groups that joins (single linkage)."""
    collapse_cosine: float = bounded(0.95, 0, 1, inclusive=False)
    """The population looks collapsed when every pair of living instructions is at least this alike (cosine)…"""
    collapse_entropy: float = bounded(0.05, 0, 1)
    """…or when its sampling distribution's entropy is at most this fraction of the maximum, ln N."""
    collapse_steps: int = bounded(3, 1, 1_000_000)
    """K: the alarm trips once the population has looked collapsed for this many consecutive steps."""


@dataclass
class EvolutionConfig:
    """Generate → verify evolution of the population by the optimizer LLM."""

    enabled: bool = True
    """Evolve at all (off with prune on = prune-only; the static mode turns both off)."""
    proposer: Proposer = "reflection"
    """Which proposer writes candidates: reflection (INSPO), paraphrase (APE-style), history (OPRO-style)."""
    evolve_every: int = bounded(15, 1, 1_000_000)
    """K_e: evolve after every K_e-th step."""
    evolve_until: int = bounded(150, 0, 1_000_000)
    """T_e: no evolution after this step (evolution happens at steps s ≤ T_e, i.e. 0-based t < T_e)."""
    n_failures: int = bounded(4, 1, 64)
    """Failure trajectories shown to the optimizer per parent."""
    n_candidates: int = bounded(6, 1, 32)
    """N: candidates asked of the optimizer per call."""
    verify: bool = True
    """Score candidates with the current policy before they join (off = prune-and-expand ablation)."""
    verify_samples: int = bounded(200, 1, 100_000)
    """|D_B|: questions drawn from the replay buffer to score each candidate (G = 1)."""
    max_verify_rounds: int = bounded(5, 1, 100)
    """At most this many generate → verify rounds per evolution."""
    verify_min_ratio: float = bounded(1.0, 0, 10)
    """A candidate joins only if its verification score ≥ ratio × its parent's, both scored on the same D_B questions
    (1 = never below its parent: the paper's "low-performing candidates are rejected"; 0 = rank only)."""
    reset_weights: WeightReset = "all"
    """After evolution, reset the weights of all instructions (Algorithm 1) or only of the new ones."""
    replay_capacity: int = bounded(50_000, 1, 500_000)
    """Trajectories kept in the replay buffer (oldest dropped first)."""


@dataclass
class EnvConfig:
    """The search-tool environment (Search-R1 protocol)."""

    max_turns: int = bounded(4, 1, 32)
    """Turns that may search, counted as Search-R1 counts them (4 for 3B, 6 for 7B in the paper); one more, final
    turn may only answer."""
    top_k: int = bounded(3, 1, 100)
    """Passages returned per search."""
    max_turn_tokens: int = bounded(500, 1, 32_768)
    """Truncation of each model turn."""
    max_obs_tokens: int = bounded(500, 1, 32_768)
    """Truncation of each observation."""
    max_prompt_length: int = bounded(4096, 16, 1_000_000)
    """Longest prompt (instruction + question + history) in tokens."""
    dataset: str = "builtin"
    """Training data: 'builtin' (offline QA from packaged facts) or a FlashRAG JSONL path."""
    corpus: str = "builtin"
    """Passage corpus: 'builtin' or a FlashRAG corpus JSONL path."""
    retriever: Literal["dense", "bm25", "remote"] = "dense"
    """Retriever kind."""
    retriever_url: str | None = None
    """URL of a Search-R1-compatible /retrieve server when retriever is 'remote'."""
    instruction_placement: Placement = "user"
    """Where the instruction goes: 'user' = before the question in the user turn (the paper's App. F, Search-R1's
    template); 'system' = the system message, the question alone in the user turn."""
    reward: Reward = "em"
    """Training (and verification) reward: 'em' = exact match (the paper); 'em_format' = exact match plus partial
    credit for a well-formed trajectory, in the spirit of Search-R1's qa_em_format (see rewards.em_format_reward)."""
    format_score: float = bounded(0.2, 0, 0.5)
    """em_format: score of a well-formed trajectory (Search-R1's sequence rule) whose answer is wrong; a correct
    answer in a malformed trajectory scores 1 − format_score, a wrong one 0."""
    retrieval_score: float = bounded(0.1, 0, 0.5)
    """em_format: added to format_score when a well-formed, wrong trajectory retrieved a passage with a gold answer."""
    answer_score: float = bounded(0.0, 0, 0.25)
    """em_format: score of a malformed trajectory whose rollout ended with a wrong answer (Search-R1's
    `final_format_score`; 0 there and here by default): a first rung for a model that never writes the whole
    protocol."""
    f1_score: float = bounded(0.0, 0, 0.5)
    """em_format: a well-formed trajectory whose answer is wrong also earns f1_score × the answer's token F1 against
    the gold answers (0 by default; Search-R1 pays exact match only): "Lima is the capital of Peru" for Lima earns a
    third of it, a bare "Lima" would earn 1. A rung from quoting the passages to the short answer they hold."""
    format_requires_search: bool = False
    """em_format: a trajectory earns the well-formed credit (format_score, and the full 1 for a correct answer) only
    if it also searched at least once; a perfect answer from memory scores like a malformed one. Pays the protocol
    to the rollouts that use the tool."""
    response_prefix: str = ""
    """Text the environment writes at the start of every reply before the model continues it (R1-Zero templates
    open the reply with '<think>'). It is part of the response the reward reads, and never trained. Torch backend
    only."""
    final_turn_prefix: str = ""
    """Text the environment writes after the observation of the last search a rollout may make (or after the note
    that follows a turn without action at that point), opening the final turn, which may only answer (e.g.
    '<answer>': the model then writes the answer's words and closes the tag). Like response_prefix it is part of
    the response the reward reads and never trained. Torch backend only."""


@dataclass
class BackendConfig:
    """Which policy backend trains the model, and on what."""

    name: Literal["torch", "verl"] = "torch"
    """torch: one process, CPU or one GPU; verl: a GPU cluster."""
    model: str = "smollm2-135m-instruct"
    """A local Hugging Face model directory, a hub id (deployment only) or 'smollm2-135m-instruct'."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the torch backend runs; auto picks CUDA when present."""
    max_new_tokens: int = bounded(500, 1, 32_768)
    """Generation budget per model turn."""
    rollout_dtype: Literal["policy", "bfloat16"] = "policy"
    """Weights the torch backend's rollouts read: 'policy' (the trained weights themselves) or 'bfloat16' (a copy
    refreshed after every update; on a CPU with AMX or AVX512-BF16 decoding runs about twice as fast, but rollouts
    then sample from a slightly different policy than the float32 one whose log-probs the update uses — the docs
    give the measured mismatch). A policy already in that dtype (CUDA) is read directly."""
    reference_dtype: Literal["policy", "bfloat16"] = "policy"
    """How the torch backend stores the frozen reference policy of the KL term: 'policy' (a float32 copy of the
    initial weights) or 'bfloat16' (its linear and embedding weights rounded to bfloat16 and widened to float32 at
    each use: the reference pass still computes in float32, in half the memory — 0.27 GB for SmolLM2-135M; the
    docs give the measured log-prob difference). verl keeps its own reference (FSDP); LoRA runs need no copy."""
    precision: Literal["auto", "fp32", "bf16-mixed"] = "fp32"
    """Numeric precision of the torch backend. 'auto': 'bf16-mixed' where bfloat16 products run natively (a CUDA GPU
    of compute capability 8.0 or later, a CPU with AVX512-BF16 or AMX), 'fp32' elsewhere — decided when the run
    starts, recorded in its run_started event; without those instructions bfloat16 is emulated and slower than
    float32. 'fp32': float32 weights and products (rollout_dtype and reference_dtype may still ask for bfloat16
    copies). 'bf16-mixed': bfloat16 matrix products under autocast (CPU
    and CUDA alike) for rollouts, old and reference log-probs and the update, while the trained weights and AdamW's
    state stay float32 (a 5e-7 step is not rounded away) and the log-softmax, loss and advantages are float32;
    rollouts read a bfloat16 copy and the reference is stored in bfloat16, whatever rollout_dtype and
    reference_dtype say. The cpu-demo, quick and smoke presets use 'auto'; docs/precision.md has the
    measurements. verl runs its own mixed precision whatever this says: FSDP with float32 masters and bfloat16
    products (its `mixed_precision.param_dtype`), and bfloat16 rollouts in vLLM — the 'bf16-mixed' recipe."""


@dataclass
class OptimizerConfig:
    """The optimizer LLM. The API key never lives in the config: the caller passes it."""

    provider: Literal["gemini", "openai", "local", "rules"] = "gemini"
    """gemini (google-genai), openai (any OpenAI-compatible endpoint), local (a weak local LLM), rules (offline
    heuristic edits driven by the failures shown; not an LLM)."""
    model: str = "gemini-2.5-pro"
    """Model name at the provider."""
    base_url: str | None = None
    """Endpoint override (required for openai unless `endpoint` names one). On the platform a run that gives one
    must also name its team's own key in `team_secret`; the server's keys never go to a URL a user chose."""
    endpoint: str | None = None
    """Name of an optimizer endpoint the platform's operator declared (its URL, key, models and budget); the web
    app resolves it, the engine never sees its key."""
    team_secret: str | None = None
    """Name of the team's stored API key to send to `base_url` (platform only; the CLI reads keys from the
    environment)."""
    timeout_s: float = bounded(120.0, 0, 3600, inclusive=False)
    """Per-call timeout."""
    max_retries: int = bounded(5, 0, 100)
    """Retries on 429/5xx/timeouts, with exponential backoff."""
    backoff_s: float = bounded(2.0, 0, 600)
    """First backoff delay."""
    temperature: float = bounded(1.0, 0, 2)
    """Optimizer sampling temperature."""
    max_output_tokens: int = bounded(8192, 1, 1_000_000)
    """Longest optimizer answer."""
    max_calls: int = bounded(50, 0, 1000)
    """Budget in calls; when spent, evolution stops with an event and training continues."""
    max_tokens: int = bounded(2_000_000, 0, 50_000_000)
    """Budget in tokens (input + output)."""
    local_model_path: str | None = None
    """Model directory for the local provider."""
    local_max_new_tokens: int = bounded(512, 1, 32_768)
    """Generation budget of the local provider."""


@dataclass
class EvalConfig:
    """Periodic evaluation with the best instruction."""

    eval_every: int = bounded(100, 0, 1_000_000)
    """Evaluate after every n-th step and at the end (0 = only at the end)."""
    eval_at_start: bool = False
    """Also evaluate before the first step, with the untrained policy and the initial best instruction (a run that
    starts from step 0 only): the baseline the run page's "What this run learnt" compares the final evaluation with,
    question by question."""
    benchmarks: list[str] = field(default_factory=lambda: ["builtin"])
    """Benchmark names (FlashRAG names or 'builtin')."""
    eval_samples: int = bounded(0, 0, 1_000_000)
    """Questions per benchmark (0 = all)."""
    split: str = "test"
    """The benchmarks' split evaluated (a FlashRAG file is its own split)."""
    sample_seed: int | None = bounded(None, 0, None)
    """Which eval_samples questions: None = the first ones; a seed = that many drawn by it (the same benchmark, size
    and seed give the same questions, so runs compare question by question)."""


@dataclass
class CheckpointConfig:
    """When checkpoints are written."""

    checkpoint_every: int = bounded(100, 0, 1_000_000)
    """Save after every n-th step and at the end (0 = only at the end)."""
    keep_last: int = bounded(3, 0, MAX_CHECKPOINTS)
    """Older checkpoints beyond this many are deleted (0 = keep all)."""
    optimizer_state: OptimizerRetention = "latest"
    """Which checkpoints keep the trainer's optimizer state, which only resuming needs (with AdamW twice the
    policy's size): 'latest' = only the newest checkpoint of a run that can still resume (dropped from the older
    ones as each new one is written, and not kept by the last checkpoint of a run that ran all its steps); 'all' =
    every checkpoint."""


TRACKERS = ("mlflow", "wandb", "tensorboard")
"""The experiment trackers a run may send its events to (docs/tracking.md)."""


@dataclass
class TrackingConfig:
    """Experiment trackers that receive the run's events besides the platform (docs/tracking.md)."""

    backends: list[str] = field(default_factory=list)
    """Any of 'mlflow', 'wandb' and 'tensorboard' (none by default). Each needs the `tracking` extra installed."""
    project: str = "inspo"
    """The MLflow experiment and the W&B project the run is logged under."""
    mlflow_uri: str | None = None
    """An MLflow tracking server (http or https; on the platform the host allow-list applies). None: a file store
    in the run directory, `mlruns/`."""
    wandb_secret: str | None = None
    """Name of the team's stored W&B API key (platform only). Without a key W&B runs offline and writes its run
    directory under the run directory, `wandb/`."""
    mlflow_secret: str | None = None
    """Name of the team's stored MLflow token (platform only), sent as the bearer token to `mlflow_uri` and nowhere
    else; it needs `mlflow_uri`."""


@dataclass
class RunConfig:
    """A whole run. Build it from a preset, override fields, validate, hand it to the engine."""

    schema_version: int = SCHEMA_VERSION
    """Version of this structure; loading refuses newer ones."""
    seed: int = bounded(0, 0, None)
    """Seeds every sampler: same seed and config replay the same instruction samples."""
    mode: Mode = "online"
    """online (INSPO), static (Search-R1 baseline), pre (optimise the instruction before RL), post (after RL),
    random-pool (INSPO's initial population, drawn once before step 0, sampled uniformly at every step and never
    pruned, evolved or weighted: instruction diversity without optimisation)."""
    log_trajectories: int = bounded(4, 0, 64)
    """Trajectories per step kept in events for the trajectory viewer."""
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    population: PopulationConfig = field(default_factory=PopulationConfig)
    evolution: EvolutionConfig = field(default_factory=EvolutionConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    # -- serialisation -------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """Build and validate a config from a (possibly partial) dict; missing fields take their defaults."""
        version = data.get("schema_version", SCHEMA_VERSION)
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ConfigError([FieldError("schema_version", f"unsupported version {version!r}")])
        config, errors = build(cls, data)
        if errors:
            raise ConfigError(errors)
        assert isinstance(config, RunConfig)
        config.validate()
        return config

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError([FieldError("", f"not valid JSON: {error}")]) from error
        if not isinstance(data, dict):
            raise ConfigError([FieldError("", "a config must be a JSON object")])
        return cls.from_dict(data)

    def with_overrides(self, overrides: dict[str, Any]) -> RunConfig:
        """A validated copy with `path=value` overrides; a bare leaf name works when it is unique."""
        data = self.to_dict()
        errors: list[FieldError] = []
        for key, value in overrides.items():
            try:
                path = resolve_key(key)
            except ConfigError as error:
                errors += error.errors
                continue
            *parents, leaf = path.split(".")
            target = data
            for part in parents:
                target = target[part]
            target[leaf] = value
        if errors:
            raise ConfigError(errors)
        return RunConfig.from_dict(data)

    # -- validation ----------------------------------------------------------------------------------------

    def validate(self) -> None:
        """Raise ConfigError naming every bad field and its allowed range."""
        errors = bounds_errors(self) + _check_relations(self) + _check_strings(self) + _check_optimizer(self)
        errors += _check_tracking(self.tracking) + split_errors(self.eval.split, "eval.split")
        errors += _check_lora(self.grpo)
        if errors:
            raise ConfigError(errors)

    def evolution_steps(self, phase_steps: int | None = None) -> list[int]:
        """The 1-based steps (of an evolving phase of `phase_steps`, default total_steps) after which evolution
        runs: every evolve_every-th step up to evolve_until. The paper's numbers give 15, 30, …, 150: ten
        evolutions, which with the initial paraphrases make its 'about 11 optimizer calls'."""
        evo = self.evolution
        if not evo.enabled or self.mode in ("static", "random-pool"):
            return []
        last = min(evo.evolve_until, self.grpo.total_steps if phase_steps is None else phase_steps)
        return list(range(evo.evolve_every, last + 1, evo.evolve_every))


# -- bounds and relations --------------------------------------------------------------------------------------

MAX_INSTRUCTION_CHARS = 20_000
"""The longest instruction (the seed and each of initial_instructions) a config may carry."""
MAX_STRING_CHARS = 4096
"""The longest value of any other string field (a path, URL or name)."""
MAX_LIST_ITEMS = {"population.initial_instructions": 63, "eval.benchmarks": 64, "grpo.lora_targets": 32}
"""The most items a list field may hold."""


def field_value(config: RunConfig, path: str) -> Any:
    """The value of the field at a dotted path: `field_value(config, "grpo.lr")`."""
    value: Any = config
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _check_relations(config: RunConfig) -> list[FieldError]:
    grpo, pop, evo = config.grpo, config.population, config.evolution
    errors = []
    if pop.n_parents > pop.population_size:
        errors.append(FieldError("population.n_parents", f"must be ≤ population_size ({pop.population_size})"))
    if evo.evolve_until > grpo.total_steps:
        errors.append(FieldError("evolution.evolve_until", f"must be ≤ total_steps ({grpo.total_steps})"))
    if grpo.mini_batch_size > grpo.batch_size:
        errors.append(FieldError("grpo.mini_batch_size", f"must be ≤ batch_size ({grpo.batch_size})"))
    if grpo.micro_batch_size > grpo.mini_batch_size:
        errors.append(FieldError("grpo.micro_batch_size", f"must be ≤ mini_batch_size ({grpo.mini_batch_size})"))
    if len(pop.initial_instructions) + 1 > pop.population_size:
        errors.append(FieldError("population.initial_instructions", "seed + these exceed population_size"))
    if not pop.seed_instruction.strip():
        errors.append(FieldError("population.seed_instruction", "must not be empty"))
    if config.env.answer_score > config.env.format_score:
        errors.append(FieldError("env.answer_score", f"must be ≤ format_score ({config.env.format_score})"))
    wrong_at_most = config.env.format_score + config.env.retrieval_score + config.env.f1_score
    if wrong_at_most >= 1:
        errors.append(
            FieldError(
                "env.f1_score",
                f"format_score + retrieval_score + f1_score ({wrong_at_most:g}) must stay below 1, what a correct "
                "answer in a well-formed trajectory earns",
            )
        )
    if config.backend.name == "verl":
        for name in ("response_prefix", "final_turn_prefix"):
            if getattr(config.env, name):
                errors.append(FieldError(f"env.{name}", "is supported by the torch backend only"))
        if grpo.drop_uniform_groups:
            errors.append(FieldError("grpo.drop_uniform_groups", "is supported by the torch backend only"))
        if config.backend.reference_dtype != "policy":
            errors.append(FieldError("backend.reference_dtype", "is supported by the torch backend only"))
        if grpo.rollout_correction != "none":
            errors.append(FieldError("grpo.rollout_correction", "is supported by the torch backend only"))
        errors += _verl_loss_errors(grpo)
    if config.env.retriever == "remote" and not config.env.retriever_url:
        errors.append(FieldError("env.retriever_url", "is required when retriever is 'remote'"))
    if config.optimizer.provider == "openai" and not (config.optimizer.base_url or config.optimizer.endpoint):
        errors.append(FieldError("optimizer.base_url", "is required when provider is 'openai' (or name an endpoint)"))
    if config.optimizer.provider == "local" and not config.optimizer.local_model_path:
        errors.append(FieldError("optimizer.local_model_path", "is required when provider is 'local'"))
    return errors + _check_checkpoints(config)


def _verl_loss_errors(grpo: GRPOConfig) -> list[FieldError]:
    """The loss settings verl 0.9.1 has no config key for (docs/losses.md lists what each backend honours)."""
    errors = []
    if grpo.scale_rewards == "batch":
        errors.append(FieldError("grpo.scale_rewards", "'batch' is supported by the torch backend only"))
    if grpo.drop_truncated:
        errors.append(FieldError("grpo.drop_truncated", "is supported by the torch backend only"))
    if grpo.use_lora and grpo.lora_dropout:
        errors.append(FieldError("grpo.lora_dropout", "verl 0.9.1 has no key for LoRA dropout: the torch backend only"))
    return errors


def _check_checkpoints(config: RunConfig) -> list[FieldError]:
    """keep_last = 0 keeps every checkpoint: refuse it when the run would write more than MAX_CHECKPOINTS."""
    every, steps = config.checkpoint.checkpoint_every, config.grpo.total_steps
    written = (steps // every if every else 0) + 1  # every n-th step, and the last one
    if config.checkpoint.keep_last == 0 and written > MAX_CHECKPOINTS:
        message = (
            f"0 keeps every checkpoint: this run would keep {written}, more than {MAX_CHECKPOINTS}; "
            f"set keep_last ≤ {MAX_CHECKPOINTS} or a larger checkpoint_every"
        )
        return [FieldError("checkpoint.keep_last", message)]
    return []


_INSTRUCTION_FIELDS = ("population.seed_instruction", "population.initial_instructions")


def _check_strings(config: RunConfig) -> list[FieldError]:
    """No '$' anywhere: config strings reach interpolating systems (verl's Hydra/OmegaConf resolves '${…}').
    Every string and list has a length limit (MAX_INSTRUCTION_CHARS, MAX_STRING_CHARS, MAX_LIST_ITEMS)."""
    errors = []
    for path, most in MAX_LIST_ITEMS.items():
        count = len(field_value(config, path))
        if count > most:
            errors.append(FieldError(path, f"must have at most {most} items, got {count}"))
    for path, text in string_fields(config, ""):
        field_path = path.split("[", 1)[0]
        if "$" in text:
            errors.append(FieldError(field_path, "must not contain '$' (no interpolation)"))
        most = MAX_INSTRUCTION_CHARS if field_path in _INSTRUCTION_FIELDS else MAX_STRING_CHARS
        if len(text) > most:
            errors.append(FieldError(field_path, f"must be at most {most} characters, got {len(text)}"))
    return errors


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""A name (tracking project, a stored secret's, an endpoint's); always matched whole (`fullmatch`), so a trailing
newline is refused."""
SPLIT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
"""A split: a file name without its `.jsonl`, never a path (no '/', no '..')."""


def split_errors(split: str, field_path: str) -> list[FieldError]:
    """Why `split` is not a split's name (it is joined into `<directory>/<split>.jsonl`).

    >>> split_errors("test", "eval.split")
    []
    >>> [e.message for e in split_errors("../other/test", "eval.split")]
    ["must be a split's name: letters, digits, '_', '.', '-' (≤ 64), not '..'"]
    """
    if SPLIT_NAME.fullmatch(split) and ".." not in split:
        return []
    return [FieldError(field_path, "must be a split's name: letters, digits, '_', '.', '-' (≤ 64), not '..'")]


def _check_tracking(tracking: TrackingConfig) -> list[FieldError]:
    errors = []
    unknown = [name for name in tracking.backends if name not in TRACKERS]
    if unknown or len(set(tracking.backends)) != len(tracking.backends):
        errors.append(FieldError("tracking.backends", f"must be distinct names among {', '.join(TRACKERS)}"))
    if not _NAME.fullmatch(tracking.project):
        errors.append(FieldError("tracking.project", "must be a name: letters, digits, '_', '.', '-' (≤ 64)"))
    uri = tracking.mlflow_uri
    if uri is not None and (not re.match(r"https?://[^\s/]+", uri) or any(c.isspace() for c in uri)):
        errors.append(FieldError("tracking.mlflow_uri", "must be an http(s) URL; leave it empty for mlruns/"))
    for name in ("wandb_secret", "mlflow_secret"):
        value = getattr(tracking, name)
        if value is not None and not _NAME.fullmatch(value):
            errors.append(FieldError(f"tracking.{name}", "must be a name: letters, digits, '_', '.', '-' (≤ 64)"))
    if tracking.mlflow_secret is not None and uri is None:
        errors.append(FieldError("tracking.mlflow_secret", "a token goes only to a server: set tracking.mlflow_uri"))
    return errors


_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,127}")
ALL_LINEAR = "all-linear"


def _check_lora(grpo: GRPOConfig) -> list[FieldError]:
    """lora_targets: module names, or 'all-linear' alone; lora_dropout below 1."""
    errors = []
    targets = grpo.lora_targets
    names = [t for t in targets if t != ALL_LINEAR]
    if not targets or (ALL_LINEAR in targets and len(targets) > 1) or not all(_MODULE_NAME.fullmatch(t) for t in names):
        message = "must be module names (q_proj, v_proj, …) or ['all-linear'] alone"
        errors.append(FieldError("grpo.lora_targets", message))
    if grpo.lora_dropout >= 1:
        errors.append(FieldError("grpo.lora_dropout", "must be < 1"))
    return errors


def _check_optimizer(config: RunConfig) -> list[FieldError]:
    optimizer, errors = config.optimizer, []
    for name in ("endpoint", "team_secret"):
        value = getattr(optimizer, name)
        if value is not None and not _NAME.fullmatch(value):
            errors.append(FieldError(f"optimizer.{name}", "must be a name: letters, digits, '_', '.', '-' (≤ 64)"))
    if optimizer.endpoint and optimizer.base_url:
        errors.append(FieldError("optimizer.base_url", "give base_url or name an endpoint, not both"))
    if optimizer.team_secret and not optimizer.base_url:
        errors.append(FieldError("optimizer.team_secret", "is sent only to a base_url; give one"))
    return errors


# -- key paths and presets -----------------------------------------------------------------------------------


def field_paths(cls: type = RunConfig, prefix: str = "") -> list[str]:
    """Every leaf field of the config as a dotted path."""
    return list(leaf_paths(cls, prefix))


# The paper's names for INSPO's knobs: `--set temperature=…` means τ_s even though other sections have one too.
INSPO_FIELDS = {
    "population_size": "population.population_size",
    "n_parents": "population.n_parents",
    "temperature": "population.temperature",
    "weight_window": "population.weight_window",
    "prune_every": "population.prune_every",
    "evolve_every": "evolution.evolve_every",
    "evolve_until": "evolution.evolve_until",
    "n_failures": "evolution.n_failures",
    "verify_samples": "evolution.verify_samples",
    "n_candidates": "evolution.n_candidates",
    "max_verify_rounds": "evolution.max_verify_rounds",
    "total_steps": "grpo.total_steps",
    "group_size": "grpo.group_size",
    "lr": "grpo.lr",
    "kl_coef": "grpo.kl_coef",
    "clip_ratio": "grpo.clip_ratio",
    "max_turns": "env.max_turns",
    "top_k": "env.top_k",
}


def resolve_key(key: str) -> str:
    """A dotted path, one of the paper's INSPO names, or a bare leaf name that names exactly one field."""
    paths = field_paths()
    if key in paths:
        return key
    if key in INSPO_FIELDS:
        return INSPO_FIELDS[key]
    matches = [p for p in paths if p.rsplit(".", 1)[-1] == key]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ConfigError([FieldError(key, f"ambiguous; use one of {', '.join(matches)}")])
    raise ConfigError([FieldError(key, "unknown field")])
