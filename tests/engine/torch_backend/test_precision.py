"""`backend.precision`: bf16-mixed keeps small AdamW steps that bfloat16 weights lose, and its log-probs and gradients
stay close to float32's, on the tiny and the real SmolLM2-135M on CPU (the same code serves CUDA)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from inspo_engine.backends.torch.grpo import GRPOTrainer
from inspo_engine.backends.torch.losses import group_advantages
from inspo_engine.backends.torch.model import load_policy
from inspo_engine.backends.torch.precision import native_bfloat16, plan, resolve
from inspo_engine.backends.torch.samples import TrainSample
from inspo_engine.config import GRPOConfig, RunConfig
from inspo_engine.config_fields import ConfigError
from inspo_engine.models import SMOLLM2, resolve_model
from inspo_engine.presets import preset

CACHE_DIR = Path(__file__).resolve().parents[3] / "cache" / "test-models"
CPU = torch.device("cpu")
BF16 = torch.bfloat16


@pytest.fixture(scope="module", autouse=True)
def one_cpu_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def smollm2():
    model, tokenizer = load_policy(resolve_model(SMOLLM2, CACHE_DIR), device=CPU, dtype=torch.float32)
    model.requires_grad_(False)
    return model, tokenizer


@pytest.fixture(scope="module")
def tiny(smollm2):
    """A 2-layer, 64-wide Llama with SmolLM2's vocabulary and tied embeddings, randomly initialised (seed 0)."""
    base, _ = smollm2
    shape = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4)
    config = type(base.config).from_dict(base.config.to_dict() | shape | dict(num_key_value_heads=2, head_dim=16))
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = type(base)(config)
    model.eval().requires_grad_(False)
    return model


@pytest.fixture(scope="module")
def samples(smollm2):
    """Two groups of two rollouts with an observation (mask 0) inside each searching response."""
    tokenizer = smollm2[1]

    def ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    def rollout(question: str, segments: list[tuple[str, int]], advantage: float) -> TrainSample:
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                               tokenize=False)  # fmt: skip
        response = [(token, trained) for text, trained in segments for token in ids(text)]
        return TrainSample(ids(prompt), [t for t, _ in response], [m for _, m in response], advantage)

    observation = ("\n<information> Shakespeare wrote it. </information>\n", 0)
    groups = [
        ("Who wrote Hamlet?", [[("<search> Hamlet </search>", 1), observation, ("<answer> Shakespeare </answer>", 1)],
                               [("<answer> Marlowe </answer>", 1)]], [1.0, 0.0]),
        ("Capital of France?", [[("<answer> Paris </answer>", 1)], [("<answer> Lyon </answer>", 1)]], [1.0, 0.0]),
    ]  # fmt: skip
    advantages = group_advantages([rewards for *_, rewards in groups])
    return [
        rollout(question, segments, advantage)
        for (question, responses, _), group in zip(groups, advantages, strict=True)
        for segments, advantage in zip(responses, group, strict=True)
    ]


def _config(**overrides) -> GRPOConfig:
    base = dict(group_size=2, batch_size=2, mini_batch_size=2, micro_batch_size=2, total_steps=10, warmup_ratio=0.0)
    return GRPOConfig(**(base | overrides))


def _trainer(model, tokenizer, *, dtype=torch.float32, compute=None, **config) -> GRPOTrainer:
    policy = copy.deepcopy(model).to(dtype).requires_grad_(True)
    return GRPOTrainer(policy, tokenizer, _config(**config), device=CPU, compute_dtype=compute)


def _changed_share(before: dict[str, torch.Tensor], model) -> float:
    """The share of weight elements that an update changed."""
    changed = sum(int((p.detach() != before[name]).sum()) for name, p in model.named_parameters())
    return changed / sum(p.numel() for p in before.values())


def test_a_5e_7_adamw_step_changes_the_float32_masters_under_bf16_mixed(tiny, smollm2, samples):
    trainer = _trainer(tiny, smollm2[1], compute=BF16, lr=5e-7)
    before = {name: p.detach().clone() for name, p in trainer.policy.named_parameters()}
    result = trainer.update(samples)
    assert result.metrics["optimizer_steps"] == 1.0 and result.metrics["grad_norm"] > 0
    assert all(p.dtype == torch.float32 for p in trainer.policy.parameters())
    assert all(s["exp_avg"].dtype == torch.float32 for s in trainer.optimizer.state.values())
    share = _changed_share(before, trainer.policy)
    print(f"\nbf16-mixed, lr 5e-7: {share:.1%} of the float32 master weights changed")
    assert share > 0.9


def test_the_same_step_on_bfloat16_weights_rounds_almost_every_change_away(tiny, smollm2, samples):
    """The failure mode the masters avoid: AdamW moves a weight by about lr, far below half a bfloat16 step."""
    trainer = _trainer(tiny, smollm2[1], dtype=BF16, lr=5e-7)
    before = {name: p.detach().clone() for name, p in trainer.policy.named_parameters()}
    result = trainer.update(samples)
    assert result.metrics["optimizer_steps"] == 1.0 and result.metrics["grad_norm"] > 0
    share = _changed_share(before, trainer.policy)
    print(f"\nbfloat16 weights, lr 5e-7: {share:.2%} of the weights changed")
    assert share < 0.05


def test_bf16_mixed_log_probs_stay_within_tolerance_of_float32_on_smollm2(smollm2, samples):
    """Stated tolerance on the real SmolLM2-135M: mean |Δ log p| < 0.05 nats and max < 0.5 over the trained tokens
    (bfloat16 products, float32 log-softmax); the rows are float32."""
    base, tokenizer = smollm2
    policy = copy.deepcopy(base).requires_grad_(True)
    exact = GRPOTrainer(policy, tokenizer, _config(), device=CPU, ref_model=base)
    mixed = GRPOTrainer(policy, tokenizer, _config(), device=CPU, ref_model=base, compute_dtype=BF16)
    rows = mixed.logprob_rows(mixed.policy, samples)
    exact_rows = exact.logprob_rows(exact.policy, samples)
    assert all(row.dtype == torch.float32 for row in rows)
    gaps = torch.cat([(a - b).abs() for a, b in zip(rows, exact_rows, strict=True)])
    print(f"\nbf16-mixed vs float32, SmolLM2: |Δ log p| mean {gaps.mean():.4f}, max {gaps.max():.4f} ({gaps.numel()})")
    assert 0 < gaps.mean() < 0.05 and gaps.max() < 0.5


def test_bf16_mixed_gradients_point_where_float32_ones_do(tiny, smollm2, samples):
    """The output head's hand-written backward recomputes its logits under the forward's autocast: the mixed
    gradient of every parameter stays aligned with the float32 one."""
    grads = []
    for compute in (None, BF16):
        trainer = _trainer(tiny, smollm2[1], compute=compute, kl_coef=0.0)
        trainer.accumulate(samples, None, trainer.reference_logprob_rows(samples), micro_size=len(samples))
        grads.append({name: p.grad.clone() for name, p in trainer.policy.named_parameters()})
    exact, mixed = grads
    for name, grad in exact.items():
        cosine = torch.nn.functional.cosine_similarity(grad.flatten(), mixed[name].flatten(), dim=0)
        assert mixed[name].dtype == torch.float32 and cosine > 0.97, (name, float(cosine))


def test_a_bf16_mixed_reference_is_stored_in_bfloat16_and_agrees_with_the_mixed_policy(tiny, smollm2, samples):
    base = copy.deepcopy(tiny).requires_grad_(True)
    trainer = GRPOTrainer(base, smollm2[1], _config(), device=CPU, reference_storage=BF16, compute_dtype=BF16)
    linear = [m.weight for m in trainer.ref_model.modules() if hasattr(m, "weight") and m.weight.ndim == 2]
    assert linear and all(w.dtype == BF16 for w in linear)
    ref = torch.cat(trainer.reference_logprob_rows(samples))
    policy = torch.cat(trainer.logprob_rows(trainer.policy, samples))
    assert (ref - policy).abs().max() < 0.05  # the same bfloat16 products; only the weights' rounding differs


def test_the_plan_follows_the_precision_and_keeps_the_old_dtype_fields_working():
    mixed = plan("bf16-mixed", rollout_dtype="policy", reference_dtype="policy")
    assert (mixed.master, mixed.compute, mixed.rollout, mixed.reference) == (torch.float32, BF16, BF16, BF16)
    old = plan("fp32", rollout_dtype="bfloat16", reference_dtype="bfloat16")
    assert (old.master, old.compute, old.rollout, old.reference) == (torch.float32, None, BF16, BF16)
    assert plan("fp32").rollout is None and plan("fp32").reference is None


def test_a_stored_config_from_before_the_setting_loads_as_fp32():
    stored = RunConfig().to_dict()
    del stored["backend"]["precision"]
    stored["backend"]["rollout_dtype"] = "bfloat16"
    config = RunConfig.from_dict(stored)
    assert config.backend.precision == "fp32" and config.backend.rollout_dtype == "bfloat16"


def test_precision_is_validated_and_a_preset_moves_to_verl_whose_fsdp_runs_bf16_mixed_whatever_it_says():
    with pytest.raises(ConfigError, match=r"backend\.precision"):
        RunConfig().with_overrides({"backend.precision": "fp16"})
    for setting in ("auto", "fp32", "bf16-mixed"):
        assert RunConfig().with_overrides({"backend.precision": setting}).backend.precision == setting
        on_verl = preset("smoke").with_overrides({"backend.name": "verl", "backend.precision": setting})
        assert on_verl.backend.precision == setting


def test_the_torch_presets_choose_auto_and_a_stored_fp32_run_keeps_fp32():
    assert {name: preset(name).backend.precision for name in ("cpu-demo", "quick", "smoke")} == dict.fromkeys(
        ("cpu-demo", "quick", "smoke"), "auto"
    )
    stored = preset("cpu-demo").with_overrides({"backend.precision": "fp32"}).to_dict()
    assert RunConfig.from_dict(stored).backend.precision == "fp32"


def test_auto_computes_in_bf16_mixed_only_where_bfloat16_products_are_native():
    assert resolve("auto", CPU, native=True) == "bf16-mixed"
    assert resolve("auto", CPU, native=False) == "fp32"
    for setting in ("fp32", "bf16-mixed"):  # an explicit choice is kept on any machine
        assert resolve(setting, CPU, native=True) == resolve(setting, CPU, native=False) == setting
    with pytest.raises(ValueError, match="unknown precision 'fp16'"):
        resolve("fp16", CPU)  # type: ignore[arg-type]  # what a config from elsewhere could hold
    assert native_bfloat16(CPU, ["avx2", "avx512f", "avx512_bf16"])
    assert native_bfloat16(CPU, ["avx2", "avx512f", "amx_bf16", "amx_tile"])
    assert not native_bfloat16(CPU, ["avx2", "avx512f"])  # AVX512 alone: oneDNN emulates bfloat16
    assert not native_bfloat16(torch.device("meta"))


def test_this_machines_cpu_flags_agree_with_what_torch_detects():
    """/proc/cpuinfo, which `auto` reads, against torch's own CPUID checks on the machine running the tests."""
    torch_native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    assert native_bfloat16(CPU) == torch_native
