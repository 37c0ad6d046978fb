"""LoRA: the adapters injected into the policy (with the frozen base stored in the dtype products run in), a run's
adapters in peft's own format, the merged policy written beside them at the end, and loading an adapter onto the base
model to evaluate it. It knows modules, files and peft; it knows nothing of the GRPO step."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file
from torch import nn
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from ...config import GRPOConfig
from ...models import SMOLLM2

if TYPE_CHECKING:  # peft is imported only when LoRA is on: it adds seconds to every import of the backend
    from peft import PeftModel

ADAPTER_CONFIG = "adapter_config.json"
"""peft's description of an adapter directory: its rank, targets and the base model's name."""
ADAPTER_WEIGHTS = "adapter_model.safetensors"
"""peft's file of the adapters' weights."""
PUBLIC_NAMES = {SMOLLM2: "HuggingFaceTB/SmolLM2-135M-Instruct"}
"""The hub id a downloaded adapter names for a built-in model, so that peft finds its base outside this machine."""
ALL_LINEAR = "all-linear"
"""peft's name for every linear layer except the output head: the attention and MLP projections."""


# -- the adapters in the policy --------------------------------------------------------------------------------


def wrap_lora(model: PreTrainedModel, grpo: GRPOConfig, *, frozen_dtype: torch.dtype | None = None) -> PeftModel:
    """Inject LoRA adapters into `model` as the config says: rank r, alpha (2r unless set), dropout, and the target
    modules ('all-linear': every attention and MLP projection). Only the adapters train.

    With `frozen_dtype` (bfloat16, the dtype autocast runs products in under `bf16-mixed`), the frozen weights of
    the adapted layers are stored in that dtype (`FrozenLinear`): autocast would round them to it at every product
    anyway (it caches its copies only of weights that train, so a float32 frozen weight was converted again at every
    forward, recompute and reference pass), so the products are the same, for half the layers' memory. The
    embedding, the norms and the output head stay as loaded: they set the residual stream's dtype."""
    from peft import LoraConfig, PeftModel, get_peft_model

    rank = grpo.lora_rank
    alpha = grpo.lora_alpha if grpo.lora_alpha is not None else 2 * rank
    targets: str | list[str] = ALL_LINEAR if grpo.lora_targets == [ALL_LINEAR] else list(grpo.lora_targets)
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=grpo.lora_dropout, target_modules=targets, bias="none")
    wrapped = get_peft_model(model, config)
    assert isinstance(wrapped, PeftModel)
    if frozen_dtype is not None:
        with torch.no_grad():
            for layer in lora_layers(wrapped).values():
                base = layer.get_base_layer()
                if type(base) is nn.Linear:
                    for name, param in list(base.named_parameters(recurse=False)):
                        setattr(base, name, nn.Parameter(param.detach().to(frozen_dtype), requires_grad=False))
                    base.__class__ = FrozenLinear  # the same module, so peft's references to it hold
            _off_the_file(wrapped)
    return wrapped


def _off_the_file(model: nn.Module) -> None:
    """Give the frozen float32 weights left (embedding, norms) memory of their own. transformers maps the
    safetensors file into memory and its weights are views of that mapping: while one of them remains, every page
    read so far stays resident, including the float32 copies of the weights just narrowed (0.4 GB for SmolLM2)."""
    for param in model.parameters():
        if not param.requires_grad and param.device.type == "cpu" and param.dtype == torch.float32:
            param.data = param.data.clone()


class FrozenLinear(nn.Linear):
    """A frozen linear layer stored narrower (bfloat16) than the activations it may meet: under autocast the product
    reads the stored weight as it is (what autocast would have rounded a float32 weight to); outside it, the weight
    is widened to the input's dtype for the product, so a float32 forward still runs, on the rounded weight."""

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.dtype == self.weight.dtype or torch.is_autocast_enabled(inputs.device.type):
            return nn.functional.linear(inputs, self.weight, self.bias)
        bias = None if self.bias is None else self.bias.to(inputs.dtype)
        return nn.functional.linear(inputs, self.weight.to(inputs.dtype), bias)


def lora_layers(policy: nn.Module) -> dict[str, Any]:
    """peft's LoRA layers of `policy` by their name in its base model ({} for a model without adapters)."""
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer

    if not isinstance(policy, PeftModel):
        return {}
    base = policy.get_base_model()
    return {name: module for name, module in base.named_modules() if isinstance(module, LoraLayer)}


def lora_delta(layer: Any) -> torch.Tensor:
    """ΔW = scale · B A of the layer's active adapters (peft's own `get_delta_weight`)."""
    deltas = [layer.get_delta_weight(name) for name in layer.active_adapters if name in layer.lora_A]
    return torch.stack(deltas).sum(0) if len(deltas) > 1 else deltas[0]


# -- files -----------------------------------------------------------------------------------------------------


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


def save_merged(
    peft: Any, base: Path, tokenizer: PreTrainedTokenizerBase, directory: Path, *, dtype: torch.dtype
) -> None:
    """The policy with its adapters merged into the weights, as a plain Hugging Face directory (safetensors and the
    tokenizer) that `transformers` loads without peft, in `dtype`: the base model read again from its directory
    `base` in `dtype` (the training copy's frozen weights may be stored narrower, see `wrap_lora`), plus each
    adapted layer's ΔW. The training model is untouched."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        merged = AutoModelForCausalLM.from_pretrained(base, dtype=dtype)
        for name, layer in lora_layers(peft).items():
            weight = merged.get_parameter(f"{name}.weight")
            weight.add_(lora_delta(layer).to(weight.device, dtype))
        merged.save_pretrained(directory, safe_serialization=True)
    del merged
    tokenizer.save_pretrained(directory)
