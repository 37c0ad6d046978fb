"""LoRA checkpoints on a tiny random-weight Llama: the adapters in peft's own format (megabytes, naming their base by
a public name), the merged policy that `transformers` loads without peft at the last step, a checkpoint's adapter
evaluated on its base, and an exact resume."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from inspo_engine.backends.torch.adapters import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    FrozenLinear,
    lora_layers,
    public_base_name,
)
from inspo_engine.backends.torch.backend import TorchBackend
from inspo_engine.checkpoints import MERGED_DIR, OPTIMIZER_DIR, POLICY_DIR, directory_bytes
from inspo_engine.env.builtin import builtin_dataset
from inspo_engine.presets import preset
from inspo_engine.types import RolloutRequest

from .conftest import CACHE_DIR, EchoRetriever


def lora_config(model: Path, **overrides):
    return preset("smoke").with_overrides(
        {
            "backend.model": str(model),
            "backend.max_new_tokens": 8,
            "env.max_turns": 2,
            "grpo.use_lora": True,
            "grpo.lora_rank": 8,
            "grpo.total_steps": 2,
            "backend.precision": "bf16-mixed",  # the frozen base stored in bfloat16 (`wrap_lora`), on every machine
            "seed": 3,
            **overrides,
        }
    )


def train_steps(backend: TorchBackend, steps: int) -> None:
    questions = builtin_dataset().train[:2]
    requests = [RolloutRequest("ins-0000", "Answer.", q) for q in questions]
    for _ in range(steps):
        groups = backend.rollout(requests, group_size=2)
        groups[0][0].reward, groups[0][1].reward = 1.0, 0.0  # a signal whatever the random policy says
        backend.update(groups)


def logits(model: torch.nn.Module, ids: torch.Tensor, *, autocast: bool = False) -> torch.Tensor:
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        return model(input_ids=ids).logits.float()


def peft_on_base(tiny_llama_dir: Path, adapter: Path) -> torch.nn.Module:
    """The saved adapter on a fresh float32 copy of its base, as a user loads a download."""
    from peft import PeftModel

    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    return PeftModel.from_pretrained(base, str(adapter)).eval()


@pytest.fixture(scope="module")
def trained(tiny_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """A LoRA backend after its 2 steps, saved at step 1 (mid-run) and at step 2 (the last)."""
    backend = TorchBackend(lora_config(tiny_llama_dir), retriever=EchoRetriever(), cache_dir=CACHE_DIR)
    out = tmp_path_factory.mktemp("lora-run")
    train_steps(backend, 1)
    backend.save(out / "step-1")
    train_steps(backend, 1)
    backend.save(out / "step-2")
    return backend, out


def test_a_lora_checkpoint_holds_the_adapters_in_peft_format_and_their_optimizer_state_only(trained, tiny_llama_dir):
    backend, out = trained
    policy = out / "step-1" / POLICY_DIR
    assert (policy / ADAPTER_WEIGHTS).is_file() and not (policy / "model.safetensors").exists()
    config = json.loads((policy / ADAPTER_CONFIG).read_text())
    assert config["r"] == 8 and config["lora_alpha"] == 16
    # peft writes 'all-linear' as a set of names, in an order that changes with the process's hash seed
    targets = config["target_modules"]
    assert targets == sorted(targets) and {t.rsplit(".", 1)[-1] for t in targets} == {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    }
    assert config["base_model_name_or_path"] == "tiny-llama"  # not the server's path
    assert str(tiny_llama_dir.parent) not in (policy / ADAPTER_CONFIG).read_text()
    base = directory_bytes(tiny_llama_dir)
    assert directory_bytes(out / "step-1" / POLICY_DIR / ADAPTER_WEIGHTS) < base / 10
    trainable = sum(p.numel() for p in backend.trainer.trainable)
    assert trainable < sum(p.numel() for p in backend.trainer.policy.parameters()) / 10
    state = torch.load(out / "step-1" / OPTIMIZER_DIR / "trainer_state.pt", weights_only=True)
    moments = sum(v.numel() for s in state["optimizer"]["state"].values() for k, v in s.items() if k != "step")
    assert moments == 2 * trainable  # AdamW's two moments, for the adapters alone
    assert not (out / "step-1" / MERGED_DIR).exists()  # merged only at the last step


def test_the_last_checkpoint_holds_a_merged_policy_that_transformers_loads_without_peft(trained, tiny_llama_dir):
    _, out = trained
    merged_dir = out / "step-2" / MERGED_DIR
    assert (merged_dir / "model.safetensors").is_file() and (merged_dir / "tokenizer.json").is_file()
    assert not (merged_dir / ADAPTER_CONFIG).exists()
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32).eval()
    assert not hasattr(merged, "peft_config")
    # the float32 base as loaded plus the adapters, though training stored its frozen base in bfloat16
    ids = torch.tensor([[1, 5, 9, 40, 2]])
    expected = logits(peft_on_base(tiny_llama_dir, out / "step-2" / POLICY_DIR), ids)
    torch.testing.assert_close(logits(merged, ids), expected, rtol=1e-4, atol=1e-4)
    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    assert not torch.allclose(logits(base.eval(), ids), expected, atol=1e-4)  # the adapters changed something


def test_peft_loads_the_downloaded_adapter_onto_its_base(trained, tiny_llama_dir):
    backend, out = trained
    loaded = peft_on_base(tiny_llama_dir, out / "step-2" / POLICY_DIR)
    trained_adapters = {n: p for n, p in backend.trainer.policy.named_parameters() if p.requires_grad}
    loaded_adapters = {n: p for n, p in loaded.named_parameters() if "lora_" in n}
    assert loaded_adapters.keys() == trained_adapters.keys()
    for name, param in trained_adapters.items():
        torch.testing.assert_close(loaded_adapters[name], param, rtol=0, atol=0, msg=name)
    ids = torch.tensor([[1, 5, 9, 40, 2]])
    policy = backend.trainer.policy.eval()
    # products in bfloat16, as training ran them: the same network
    torch.testing.assert_close(
        logits(loaded, ids, autocast=True), logits(policy, ids, autocast=True), rtol=1e-3, atol=1e-3
    )


def test_evaluating_a_checkpoint_loads_its_adapter_on_the_runs_base_model(trained, tiny_llama_dir):
    backend, out = trained
    config = lora_config(tiny_llama_dir)
    adapter = out / "step-2" / POLICY_DIR
    reread = TorchBackend(config, retriever=EchoRetriever(), cache_dir=CACHE_DIR, model_path=adapter)
    questions = builtin_dataset().dev[:3]
    assert [t.response for t in reread.answer("Answer.", questions)] == [
        t.response for t in backend.answer("Answer.", questions)
    ]
    full = lora_config(tiny_llama_dir, **{"grpo.use_lora": False})
    with pytest.raises(ValueError, match=r"grpo\.use_lora off"):
        TorchBackend(full, retriever=EchoRetriever(), cache_dir=CACHE_DIR, model_path=adapter)


def test_a_lora_run_resumed_from_its_checkpoint_continues_exactly(tiny_llama_dir, tmp_path):
    config = lora_config(tiny_llama_dir, **{"grpo.total_steps": 3})
    straight = TorchBackend(config, retriever=EchoRetriever(), cache_dir=CACHE_DIR)
    train_steps(straight, 3)
    first = TorchBackend(config, retriever=EchoRetriever(), cache_dir=CACHE_DIR)
    train_steps(first, 2)
    first.save(tmp_path / "step-2")
    resumed = TorchBackend(config, retriever=EchoRetriever(), cache_dir=CACHE_DIR)
    resumed.load(tmp_path / "step-2")
    train_steps(resumed, 1)
    for a, b in zip(straight.trainer.trainable, resumed.trainer.trainable, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def file_mappings(path: Path) -> list[tuple[int, int]]:
    """The address ranges at which this process maps `path` (/proc/self/maps)."""
    ranges = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        if line.endswith(str(path.resolve())):
            start, end = line.split()[0].split("-")
            ranges.append((int(start, 16), int(end, 16)))
    return ranges


def in_ranges(address: int, ranges: list[tuple[int, int]]) -> bool:
    return any(start <= address < end for start, end in ranges)


def test_under_bf16_mixed_the_frozen_base_is_stored_in_bfloat16_and_trains_the_same_adapters(tiny_llama_dir):
    """The adapted layers' frozen weights are kept in the dtype autocast computes in: the adapters train exactly as
    with the float32 base (autocast rounded it to the same values at every product), in less memory."""
    config = lora_config(tiny_llama_dir)
    narrow = TorchBackend(config, retriever=EchoRetriever(), cache_dir=CACHE_DIR)
    kept = TorchBackend(config, retriever=EchoRetriever(), cache_dir=CACHE_DIR)
    original = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    layers = lora_layers(kept.trainer.peft)
    assert len(layers) == 2 * 7  # two blocks, seven projections each
    for name, layer in layers.items():  # `kept` gets its float32 base back, as before `wrap_lora` narrowed it
        base = layer.get_base_layer()
        assert isinstance(base, FrozenLinear) and base.weight.dtype == torch.bfloat16
        base.weight = torch.nn.Parameter(original.get_parameter(f"{name}.weight").detach(), requires_grad=False)
        base.__class__ = torch.nn.Linear
    bytes_of = {b: sum(p.numel() * p.element_size() for p in b.trainer.policy.parameters()) for b in (narrow, kept)}
    adapted = sum(original.get_parameter(f"{name}.weight").numel() for name in layers)
    assert bytes_of[kept] - bytes_of[narrow] == 2 * adapted  # two bytes saved per frozen adapted weight
    assert all(p.dtype == torch.float32 for p in narrow.trainer.trainable)
    questions = builtin_dataset().train[:2]
    groups = narrow.rollout([RolloutRequest("ins-0000", "Answer.", q) for q in questions], group_size=2)
    groups[0][0].reward, groups[0][1].reward = 1.0, 0.0
    for _ in range(2):  # the same samples for both (rollouts may differ: their copies merge ΔW into W rounded or not)
        narrow.update(groups)
        kept.update(groups)
    for a, b in zip(narrow.trainer.trainable, kept.trainer.trainable, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    # nothing of the narrowed policy is a view of the mapped safetensors file, whose read pages would stay resident
    mapped = file_mappings(tiny_llama_dir / "model.safetensors")
    assert mapped  # transformers maps it: `kept` still reads its embedding there
    assert not [n for n, p in narrow.trainer.policy.named_parameters() if in_ranges(p.data_ptr(), mapped)]
    fp32 = TorchBackend(
        lora_config(tiny_llama_dir, **{"backend.precision": "fp32"}), retriever=EchoRetriever(), cache_dir=CACHE_DIR
    )
    assert all(type(layer.get_base_layer()) is torch.nn.Linear for layer in lora_layers(fp32.trainer.peft).values())
    assert all(p.dtype == torch.float32 for p in fp32.trainer.policy.parameters())


def test_an_adapter_names_its_base_without_the_servers_paths():
    assert public_base_name("smollm2-135m-instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert public_base_name("/srv/data/team-3/models/llama-1b") == "llama-1b"
    assert public_base_name("./models/tiny-llama") == "tiny-llama"
    assert public_base_name("meta-llama/Llama-3.2-1B") == "meta-llama/Llama-3.2-1B"


def test_the_initial_adapters_are_drawn_from_the_runs_seed(tiny_llama_dir):
    def adapters(seed):
        config = lora_config(tiny_llama_dir, seed=seed)
        return TorchBackend(config, retriever=EchoRetriever(), cache_dir=CACHE_DIR).trainer.trainable

    torch.rand(3)  # whatever the process drew before
    same, again, other = adapters(5), adapters(5), adapters(6)
    assert all(torch.equal(a, b) for a, b in zip(same, again, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(same, other, strict=True))


def test_gradient_checkpointing_off_keeps_the_activations_and_trains_the_same_adapters(tiny_llama_dir, monkeypatch):
    """`grpo.gradient_checkpointing` false: no block runs again in backward (LoRA's saved memory spent on speed), and
    the update is the same."""
    from inspo_engine.backends.torch import logits

    calls = []
    real = logits.checkpoint
    monkeypatch.setattr(logits, "checkpoint", lambda *args, **kwargs: calls.append(1) or real(*args, **kwargs))
    on = TorchBackend(lora_config(tiny_llama_dir), retriever=EchoRetriever(), cache_dir=CACHE_DIR)
    off_config = lora_config(tiny_llama_dir, **{"grpo.gradient_checkpointing": False})
    off = TorchBackend(off_config, retriever=EchoRetriever(), cache_dir=CACHE_DIR)
    assert on.trainer.checkpoint_layers and not off.trainer.checkpoint_layers
    questions = builtin_dataset().train[:2]
    groups = on.rollout([RolloutRequest("ins-0000", "Answer.", q) for q in questions], group_size=2)
    groups[0][0].reward, groups[0][1].reward = 1.0, 0.0
    off.update(groups)
    assert calls == []
    on.update(groups)
    assert calls  # every block, forward (and again in backward)
    for a, b in zip(on.trainer.trainable, off.trainer.trainable, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_a_lora_policys_rollout_copy_decodes_as_full_fine_tunings_from_the_same_weights(tiny_llama_dir):
    """At the start LoRA's adapters are a no-op, so its merged bfloat16 rollout copy is full fine-tuning's: the same
    logits, and the buffers (RoPE's inv_freq) as the policy keeps them, not rounded with the weights."""
    full = TorchBackend(
        lora_config(tiny_llama_dir, **{"grpo.use_lora": False}), retriever=EchoRetriever(), cache_dir=CACHE_DIR
    )
    lora = TorchBackend(lora_config(tiny_llama_dir), retriever=EchoRetriever(), cache_dir=CACHE_DIR)
    copies = full.engine.weights.current(), lora.engine.weights.current()
    policy_buffers = dict(full.trainer.policy.named_buffers())
    for copy in copies:
        for name, buffer in copy.named_buffers():
            assert buffer.dtype == policy_buffers[name].dtype, name
    ids = torch.tensor([list(range(100, 140))])
    with torch.inference_mode():
        first, second = (copy(input_ids=ids).logits for copy in copies)
    torch.testing.assert_close(first, second, rtol=0, atol=0)
