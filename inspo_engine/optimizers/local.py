"""A weak local optimizer on a small transformers causal LM for runs without an API key; knows no HTTP or budgets."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from inspo_engine.optimizers.base import Completion, OptimizerError


class LocalModelClient:
    """WEAK FALLBACK: a small local causal LM standing in for the optimizer LLM on machines without an API key.

    A model of a few hundred million parameters proposes far poorer instructions than Gemini 2.5 Pro, so
    results obtained with it do not reproduce the paper; ``model`` carries "(weak)" so logs and reports say so.

    Weights are read from ``model_path`` only (no downloads). Sampling is deterministic: call ``k`` of this
    client (0-based) draws from ``seed + k`` in a forked RNG, so the global torch RNG is left untouched.
    A temperature of 0 decodes greedily. Token counts are exact: prompt tokens after the chat template, and
    every generated token (end-of-sequence included).
    """

    def __init__(
        self,
        *,
        model_path: str,
        max_new_tokens: int = 512,
        temperature: float = 1.0,
        seed: int = 0,
        device: str = "cpu",
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.model = f"local:{os.path.basename(os.path.normpath(model_path))} (weak)"
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.seed = seed
        self.device = device
        self._calls = 0
        self._tokenizer: Any = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
        lm: Any = AutoModelForCausalLM.from_pretrained(model_path, local_files_only=True)
        self._lm: Any = lm.to(device).eval()

    def complete(self, prompt: str, *, system: str | None = None) -> Completion:
        prompt_ids = self._encode(prompt, system)
        if not prompt_ids:
            raise OptimizerError("the local model got an empty prompt (no tokens to condition on)")
        seed = self.seed + self._calls
        self._calls += 1
        try:
            new_ids = self._generate(prompt_ids, seed)
        except OptimizerError:
            raise
        except RuntimeError as exc:
            raise OptimizerError(f"local generation with {self.model} failed: {exc}") from exc
        text = self._tokenizer.decode(new_ids, skip_special_tokens=True)
        if not text.strip():
            raise OptimizerError(f"{self.model} returned an empty answer after {len(new_ids)} tokens")
        return Completion(text=text, model=self.model, input_tokens=len(prompt_ids), output_tokens=len(new_ids))

    def _encode(self, prompt: str, system: str | None) -> list[int]:
        """Prompt token ids: through the chat template when the tokenizer has one, else the plain text."""
        tokenizer = self._tokenizer
        if not getattr(tokenizer, "chat_template", None):
            text = f"{system}\n\n{prompt}" if system else prompt
            return list(tokenizer(text)["input_ids"])
        user = {"role": "user", "content": prompt}
        messages = [{"role": "system", "content": system}, user] if system else [user]
        try:
            rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception:
            if not system:
                raise
            # Some templates reject a system turn; fold it into the user turn instead.
            merged = [{"role": "user", "content": f"{system}\n\n{prompt}"}]
            rendered = tokenizer.apply_chat_template(merged, tokenize=False, add_generation_prompt=True)
        # The template already placed any special tokens (BOS and the like) it wants.
        return list(tokenizer(rendered, add_special_tokens=False)["input_ids"])

    def _generate(self, prompt_ids: list[int], seed: int) -> list[int]:
        import torch

        input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
        options: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "do_sample": self.temperature > 0}
        if self.temperature > 0:
            options["temperature"] = self.temperature
        pad_id = self._tokenizer.pad_token_id
        if pad_id is None:
            pad_id = self._tokenizer.eos_token_id
        if pad_id is not None:
            options["pad_token_id"] = pad_id
        with _seeded_rng(torch, self.device, seed), torch.inference_mode():
            output = self._lm.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **options)
        return [int(token) for token in output[0, len(prompt_ids) :].tolist()]


@contextmanager
def _seeded_rng(torch: Any, device: str, seed: int) -> Iterator[None]:
    """Seed the RNG that ``device`` samples from inside a fork, so the caller's global RNG state is restored after."""
    device_type = torch.device(device).type
    if device_type == "cpu":
        with torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(seed)
            yield
        return
    with torch.random.fork_rng(device_type=device_type):
        torch.manual_seed(seed)
        yield
