"""LoRA checkpoints on a tiny random-weight Llama: the adapters in peft's own format (megabytes, naming their base by
a public name), the merged policy that `transformers` loads without peft at the last step, a checkpoint's adapter
evaluated on its base, and an exact resume."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from inspo_engine.backends.torch.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS, public_base_name
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


def logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits


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


def test_the_last_checkpoint_holds_a_merged_policy_that_transformers_loads_without_peft(trained):
    backend, out = trained
    merged_dir = out / "step-2" / MERGED_DIR
    assert (merged_dir / "model.safetensors").is_file() and (merged_dir / "tokenizer.json").is_file()
    assert not (merged_dir / ADAPTER_CONFIG).exists()
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32).eval()
    assert not hasattr(merged, "peft_config")
    ids = torch.tensor([[1, 5, 9, 40, 2]])
    expected = logits(backend.trainer.policy.eval(), ids)
    torch.testing.assert_close(logits(merged, ids), expected, rtol=1e-4, atol=1e-4)
    base = AutoModelForCausalLM.from_pretrained(backend.trainer.policy.get_base_model().config._name_or_path)
    assert not torch.allclose(logits(base.eval(), ids), expected, atol=1e-4)  # the adapters changed something


def test_peft_loads_the_downloaded_adapter_onto_its_base(trained, tiny_llama_dir):
    from peft import PeftModel

    backend, out = trained
    base = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    loaded = PeftModel.from_pretrained(base, str(out / "step-2" / POLICY_DIR)).eval()
    ids = torch.tensor([[1, 5, 9, 40, 2]])
    torch.testing.assert_close(logits(loaded, ids), logits(backend.trainer.policy.eval(), ids), rtol=1e-4, atol=1e-4)


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
