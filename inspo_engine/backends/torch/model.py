"""Loading the policy model and picking its device; it knows nothing about training or prompts.

Which directory a model name means, and the built-in model's cache, are `inspo_engine.models`' (it needs no torch).
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["DeviceUnavailableError", "load_policy", "pick_device"]


class DeviceUnavailableError(RuntimeError):
    """The requested device does not exist on this machine."""


# -- loading ---------------------------------------------------------------------------------------------------


def load_policy(
    path: Path, *, device: torch.device, dtype: torch.dtype
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The causal LM and its tokenizer from a local directory, on `device` in `dtype`, in eval mode.

    The tokenizer always has a pad token (eos when the model defines none) and pads on the left, for generation.
    """
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    module: torch.nn.Module = model  # nn.Module's typed to()/eval(); transformers' overrides are untyped
    module.to(device)
    module.eval()
    return model, tokenizer


def pick_device(preference: str) -> torch.device:
    """The device for a preference: 'auto' → CUDA when a GPU is present, else the CPU. The weights are float32 on
    either (bfloat16 compute is `backend.precision`'s choice: a policy stored in bfloat16 loses small updates)."""
    if preference == "auto":
        preference = "cuda" if torch.cuda.is_available() else "cpu"
    if preference == "cpu":
        return torch.device("cpu")
    if preference == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(
                "device 'cuda' was requested but no CUDA GPU is available to torch on this machine "
                f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'none'}); use 'cpu' or 'auto'."
            )
        return torch.device("cuda")
    raise ValueError(f"unknown device preference {preference!r}; choose 'auto', 'cpu' or 'cuda'")
