"""A fake of verl's LLM server manager (`LLMServerClient.generate`) backed by a tiny random model: token ids in,
`TokenOutput` out, stopping the way vLLM does (stop strings in the decoded output, EOS, max_tokens).

A script may force the first tokens of each turn (as if the model had learnt the protocol); after the script the
model samples freely. Import only after `require_verl()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from verl.workers.rollout.replica import TokenOutput


class TinyModelServer:
    """Generates with `model`; records every call (prompt ids and sampling params) in `calls`."""

    def __init__(self, model: Any, tokenizer: Any, script: Sequence[str] = (), seed: int = 0) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.script = [list(tokenizer.encode(text, add_special_tokens=False)) for text in script]
        self.generator = torch.Generator().manual_seed(seed)
        self.calls: list[dict[str, Any]] = []
        self.outputs: list[list[int]] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> TokenOutput:
        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids), **dict(sampling_params)})
        forced = self.script[len(self.outputs)] if len(self.outputs) < len(self.script) else []
        ids, logprobs = self._generate(list(prompt_ids), forced, sampling_params)
        self.outputs.append(ids)
        return TokenOutput(token_ids=ids, log_probs=logprobs, stop_reason="completed")

    @torch.inference_mode()
    def _generate(self, context: list[int], forced: list[int], params: dict[str, Any]) -> tuple[list[int], list[float]]:
        stops = params.get("stop") or []
        ids: list[int] = []
        logprobs: list[float] = []
        for i in range(int(params["max_tokens"])):
            logits = self.model(input_ids=torch.tensor([context + ids]), logits_to_keep=1).logits[0, -1].float()
            log_probs = torch.log_softmax(logits / max(float(params.get("temperature", 1.0)), 1e-5), dim=-1)
            token = (
                forced[i] if i < len(forced) else int(torch.multinomial(log_probs.exp(), 1, generator=self.generator))
            )
            ids.append(token)
            logprobs.append(float(log_probs[token]))
            if token == self.tokenizer.eos_token_id:
                break
            text = self.tokenizer.decode(ids)
            if any(stop in text for stop in stops):
                break
        return ids, logprobs
