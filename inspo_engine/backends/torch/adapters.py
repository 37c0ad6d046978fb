"""LoRA checkpoints: a run's adapters in peft's own format, the merged policy written beside them at the end, and
loading an adapter onto the base model to evaluate it. It knows files and peft; it knows nothing of the GRPO step."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from transformers import PreTrainedTokenizerBase

from ...models import SMOLLM2

ADAPTER_CONFIG = "adapter_config.json"
"""peft's description of an adapter directory: its rank, targets and the base model's name."""
ADAPTER_WEIGHTS = "adapter_model.safetensors"
"""peft's file of the adapters' weights."""
PUBLIC_NAMES = {SMOLLM2: "HuggingFaceTB/SmolLM2-135M-Instruct"}
"""The hub id a downloaded adapter names for a built-in model, so that peft finds its base outside this machine."""


def is_adapter(directory: Path) -> bool:
    """Whether `directory` holds a peft adapter rather than a whole model."""
    return (Path(directory) / ADAPTER_CONFIG).is_file()


def public_base_name(model: str) -> str:
    """The base model's name as a downloaded adapter states it: the hub id of a built-in or hub model, and only the
    last part of a path on this machine (which would tell another machine nothing and show the server's layout).

    >>> public_base_name("smollm2-135m-instruct")
    'HuggingFaceTB/SmolLM2-135M-Instruct'
    >>> public_base_name("Qwen/Qwen2.5-3B-Instruct")
    'Qwen/Qwen2.5-3B-Instruct'
    >>> public_base_name("/srv/inspo/data/team-7/models/my-llama")
    'my-llama'
    """
    if model in PUBLIC_NAMES:
        return PUBLIC_NAMES[model]
    path = Path(model).expanduser()
    if path.is_absolute() or path.exists() or model.startswith(".") or model.count("/") != 1:
        return path.name
    return model


def name_the_base(directory: Path, model: str) -> None:
    """Rewrite the adapter's `base_model_name_or_path` (peft writes the local directory it loaded) as
    `public_base_name(model)`, and its target modules in order (peft writes a set, whose order changes from one
    process to the next), atomically: the same adapters give the same bytes, so a checkpoint's digest names them."""
    path = Path(directory) / ADAPTER_CONFIG
    config = json.loads(path.read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = public_base_name(model)
    for key in ("target_modules", "exclude_modules"):
        if isinstance(config.get(key), list):
            config[key] = sorted(config[key])
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(partial, path)


def load_adapter(peft: Any, directory: Path, device: torch.device) -> None:
    """Put the adapter weights saved in `directory` into the peft model `peft` (built with the same LoRA config)."""
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(peft, load_file(Path(directory) / ADAPTER_WEIGHTS, device=str(device)))
    unexpected = getattr(result, "unexpected_keys", None) or []
    if unexpected:
        raise ValueError(f"{directory} holds adapters this run's LoRA config does not have: {unexpected[:3]}")


def save_merged(peft: Any, tokenizer: PreTrainedTokenizerBase, directory: Path, *, dtype: torch.dtype) -> None:
    """The policy with its adapters merged into the weights, as a plain Hugging Face directory (safetensors and the
    tokenizer) that `transformers` loads without peft, in `dtype`. Merges a copy: the training model is untouched."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        merged = copy.deepcopy(peft).merge_and_unload()
        merged.to(dtype)
        merged.save_pretrained(directory, safe_serialization=True)
    del merged
    tokenizer.save_pretrained(directory)
