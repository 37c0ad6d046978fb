"""The torch backend's multi-turn Search-R1 rollout engine: batched, KV-cached generation with search calls between
turns; it knows tokens and the protocol, nothing about rewards, advantages or training.

How a batch runs:

- Prompts are the tokenizer's chat template over `chat_messages` (by default the instruction, then the question, in
  the user turn; optionally the instruction as the system message). Identical
  prompts (the G rollouts of a group) are prefilled once, and the longest common token prefix of the prompts that
  share an instruction is prefilled once per instruction. On the CPU that prefix then stays in the cache once and
  every row attends to it in one matrix product with its instruction's other rows (cascade attention); elsewhere it
  is copied out to every row. The rest of each prompt is copied out to its G rollouts.
- The KV cache (`kvcache.RowCache`) keeps one write pointer per row instead of left padding, so a row that appends
  an observation just advances its own pointer.
- Each step feeds every active row its last sampled token in one batched forward (no copy of the cache); rows that
  ended a turn with a search or an invalid action then feed their observation tokens in a second forward over just
  those rows. Rows that finish (answer, or out of turns) leave the batch at once: their cache rows are dropped.
- A turn ends when the decoded tail of the turn contains a stop string (its tokens are kept), at EOS, or at the
  per-turn token budget. All searches requested in the same step go to the retriever in one call.
- A sample's answer is the content of the <answer> that ended it, taken from the model's own last turn. (Running
  `extract_answer` over the whole response would pick up the `<answer> and </answer>` that the invalid-action
  note itself shows.)
- Attention runs through the grouped attention of `kvcache` (`GROUPED_SDPA`), switched on only while `generate`
  runs. The output head runs on each row's last hidden state only.
- Tokens are drawn by `sampling.sample_tokens`: one uniform number per row, inverse CDF in two levels (blocks, then
  a token).
- On a GPU decoding never waits for the device per token (`_run_lagged`): each step's tokens are read into the cache
  on the device while their copy to the host is checked for stops, one forward behind, with the same results.
- Rollouts read `rollout_weights.RolloutWeights`: the policy itself (default), or a copy in another dtype
  refreshed from the policy whenever its weights changed (`backend.rollout_dtype`).

Supported models: decoder-only transformers models whose attention goes through transformers' `AttentionInterface`,
that accept a 4-D boolean attention mask and `position_ids`, and whose logits are the output head applied to the
decoder's last hidden state (Llama, Qwen2, Mistral, SmolLM2, …; not models with final logit soft-capping).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from ...config import EnvConfig
from ...env.protocol import (
    INVALID_ACTION_NOTE,
    STOP_STRINGS,
    Passage,
    Placement,
    Retriever,
    chat_messages,
    most_turns,
    observation,
    parse_action,
    rollout_over,
)
from ...types import Question
from .kvcache import GROUPED_SDPA, RowCache, index_tensor
from .logits import split_causal_lm
from .rollout_weights import RolloutWeights
from .samples import RolloutSample
from .sampling import sample_tokens

_TAIL_CHARS = 64
"""Characters of a turn's decoded tail searched for a stop string (well over the longest stop string)."""

_FORWARD_TOKENS = 8192
"""Most tokens (rows × chunk length) fed through the model in one forward when ingesting prompts or observations."""

_CLOSING = "</information>\n\n"
"""Kept at the end of an observation cut to max_obs_tokens, so the model still sees the block close."""


@dataclass(frozen=True)
class RolloutSettings:
    """Limits and sampling of one rollout (the Search-R1 protocol of INSPO.md)."""

    max_turns: int
    """Turns that may search (Search-R1's count); one more, final turn may only answer and ends the rollout."""
    max_turn_tokens: int
    """Token budget of one model turn."""
    max_obs_tokens: int
    """Observations longer than this are cut (keeping their closing tag)."""
    max_prompt_length: int
    """Longer prompts are not cut: the rollout fails with an error (score 0)."""
    top_k: int
    """Passages per search."""
    temperature: float = 1.0
    """Sampling temperature (ignored when greedy)."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0 = off; ignored when greedy)."""
    placement: Placement = "user"
    """Where the instruction goes in the chat (see `chat_messages`)."""
    response_prefix: str = ""
    """Text that opens every reply: read with the prompt (so never trained), and the start of the response text."""
    final_turn_prefix: str = ""
    """Text that opens the final turn, written after the observation of the last search allowed (never trained)."""

    @classmethod
    def from_config(cls, env: EnvConfig, *, temperature: float, top_p: float, max_new_tokens: int) -> RolloutSettings:
        """Settings from the run config; the per-turn budget is the smaller of the env's and the backend's."""
        return cls(
            max_turns=env.max_turns,
            max_turn_tokens=min(env.max_turn_tokens, max_new_tokens),
            max_obs_tokens=env.max_obs_tokens,
            max_prompt_length=env.max_prompt_length,
            top_k=env.top_k,
            temperature=temperature,
            top_p=top_p,
            placement=env.instruction_placement,
            response_prefix=env.response_prefix,
            final_turn_prefix=env.final_turn_prefix,
        )


@dataclass
class _Row:
    """The running state of one rollout."""

    index: int
    instruction: str
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    turn_ids: list[int] = field(default_factory=list)
    tail: str = ""
    pending: list[int] = field(default_factory=list)
    """Tokens the model has not read yet: the last sampled one, then any observation or note."""
    length: int = 0
    """Cache columns this row fills."""
    turns: int = 0
    tool_calls: int = 0
    answer: str | None = None
    done: bool = False
    error: str | None = None
    rollout_logprobs: list[float] | None = None
    """log π of each response token under the weights that sampled it (0.0 on observations), when recorded."""
    truncated: bool = False
    """The rollout ended unfinished: its last turn cut by max_turn_tokens, or the context full."""


# -- the engine ------------------------------------------------------------------------------------------------


class RolloutEngine:
    """Runs batches of Search-R1 rollouts with one policy model, its tokenizer and a retriever."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        retriever: Retriever,
        settings: RolloutSettings,
        *,
        device: torch.device,
        weights_dtype: torch.dtype | None = None,
        record_logprobs: bool = False,
    ) -> None:
        """`weights_dtype`: None (rollouts read the policy's own weights) or a dtype for a copy that rollouts read
        instead (see `RolloutWeights`). `record_logprobs`: sampled rollouts keep the log-prob of every token they
        sampled under the weights they read, at temperature 1 as the trainer scores them (`rollout_logprobs`), for
        the rollout correction; greedy ones never do."""
        self.record_logprobs = record_logprobs
        self.model = model
        self.tokenizer = tokenizer
        self.retriever = retriever
        self.settings = settings
        self.device = device
        self.weights = RolloutWeights(model, weights_dtype)
        self.share_prefixes = device.type == "cpu"
        """Whether the cache keeps shared prompt prefixes once (`RowCache`; its attention needs the CPU kernel)."""
        self._lagged = device.type == "cuda"
        """Whether decoding reads each step's tokens back one forward late (`_run_lagged`): on a GPU the host then
        checks step t for stops while the device already reads its tokens; private, so that a CPU test can run it."""
        self._parts = split_causal_lm(model)
        self._eos = _eos_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self._pad = int(pad) if pad is not None else min(self._eos, default=0)
        self._note_ids = self._encode(INVALID_ACTION_NOTE)
        self._closing_ids = self._encode(_CLOSING)
        self._final_ids = self._encode(settings.final_turn_prefix) if settings.final_turn_prefix else []
        self._max_context: int | None = getattr(model.config, "max_position_embeddings", None)
        self._texts: dict[int, str] = {}

    def generate(
        self,
        items: Sequence[tuple[str, Question]],
        *,
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> list[RolloutSample]:
        """One rollout per (instruction, question), in order; repeat an item G times for a GRPO group.

        Sampling draws only from `generator` (same seed and items → same rollouts); without one, a fresh generator
        seeded from the operating system is used. A sample that cannot run (its prompt is too long, its context
        window is full) carries its error instead of raising; a failing retriever fails the whole call.
        """
        rows = self._rows(items)
        live = [row for row in rows if row.error is None]
        if live:
            if generator is None and not greedy:
                generator = torch.Generator(device=self.device)
                generator.seed()
            with self._generation_mode(), torch.inference_mode():
                self._run(live, greedy, generator)
        return [self._result(row) for row in rows]

    # -- prompts -----------------------------------------------------------------------------------------------

    def prompt_ids(self, instruction: str, question: Question) -> list[int]:
        """The chat prompt of `chat_messages`, ready for the model's reply (which opens with the response prefix)."""
        messages = chat_messages(instruction, question.text, self.settings.placement)
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self._encode(text + self.settings.response_prefix)

    def _rows(self, items: Sequence[tuple[str, Question]]) -> list[_Row]:
        prompts: dict[tuple[str, str], list[int]] = {}
        rows = []
        for index, (instruction, question) in enumerate(items):
            key = (instruction, question.text)
            if key not in prompts:
                prompts[key] = self.prompt_ids(instruction, question)
            row = _Row(index, instruction, prompts[key])
            if len(row.prompt_ids) > self.settings.max_prompt_length:
                row.error = (
                    f"prompt has {len(row.prompt_ids)} tokens, more than max_prompt_length "
                    f"({self.settings.max_prompt_length}); it is not cut"
                )
            rows.append(row)
        return rows

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    # -- the loop ----------------------------------------------------------------------------------------------

    def _run(self, rows: list[_Row], greedy: bool, generator: torch.Generator | None) -> None:
        if self._lagged and type(self)._next_tokens is RolloutEngine._next_tokens:  # a subclass may script tokens
            self._run_lagged(rows, greedy, generator)
            return
        cache, logits = self._prefill(rows)
        active = rows
        record = self.record_logprobs and not greedy
        recorded: list[tuple[list[_Row], list[int], torch.Tensor]] = []
        while True:
            tokens = self._next_tokens(logits, active, greedy, generator)
            if record:
                recorded.append(_sampled_logprobs(logits, active, tokens))
            self._advance(active, tokens)
            keep = [i for i, row in enumerate(active) if not row.done]
            if not keep:
                break
            if len(keep) < len(active):
                cache.select_rows(keep)
                active = [active[i] for i in keep]
            logits = self._step(cache, active)
        _store_logprobs(recorded)

    def _run_lagged(self, rows: list[_Row], greedy: bool, generator: torch.Generator | None) -> None:
        """`_run` without waiting for each step's tokens before the next forward: the sampled tokens stay on the device,
        which reads them into the cache for every active row at once while their copy to the host is checked for
        stops and turn ends. Rows whose turn ended then read their observation. When rows finished, the others read
        the step's tokens again without them (overwriting the same cache columns): a forward's numbers depend on the
        batch it runs in, and this keeps every value bit for bit those of `_run`, at one more forward per step in
        which rows finish. Sampling waits for the check, so it draws exactly what `_run` draws."""
        cache, logits = self._prefill(rows)
        active = rows
        record = self.record_logprobs and not greedy
        recorded: list[tuple[list[_Row], list[int], torch.Tensor]] = []
        while True:
            chosen = self._choose(logits, active, greedy, generator)
            if record:
                recorded.append(_sampled_logprobs(logits, active, chosen))
            tokens = _HostCopy(chosen)
            logits = self._feed(cache, active, chosen[:, None])
            self._advance(active, tokens.read())
            keep = [i for i, row in enumerate(active) if not row.done]
            if not keep:
                break
            if len(keep) < len(active):  # read the tokens again without the finished rows, as `_run` reads them
                cache.select_rows(keep)
                active = [active[i] for i in keep]
                logits = self._feed(cache, active, chosen.index_select(0, index_tensor(keep, self.device))[:, None])
            logits = self._feed_rest(cache, active, logits)
        _store_logprobs(recorded)

    def _prefill(self, rows: list[_Row]) -> tuple[RowCache, torch.Tensor]:
        """Read every prompt into a fresh cache; returns it with one row per rollout and each row's next logits.

        Each distinct prompt is read once, after its instruction's shared token prefix, read once per instruction.
        On the CPU the prefixes stay shared in the cache (see `RowCache`); elsewhere each row gets its own copy.
        """
        distinct: dict[tuple[int, ...], int] = {}
        prompt_of_row = [distinct.setdefault(tuple(row.prompt_ids), len(distinct)) for row in rows]
        prompts = [list(ids) for ids in distinct]
        owners: dict[int, str] = {}
        for row, prompt in zip(rows, prompt_of_row, strict=True):
            owners.setdefault(prompt, row.instruction)
        group_of_prompt, shared = _shared_prefixes(prompts, [owners[p] for p in range(len(prompts))])
        longest = max(len(ids) for ids in prompts)
        observed = max(self.settings.max_obs_tokens, len(self._note_ids)) + len(self._final_ids)
        margin = self.settings.max_turn_tokens + observed
        capacity = longest + self.settings.max_turn_tokens + 1
        cache = RowCache(len(shared), capacity=capacity, margin=margin, device=self.device)
        if any(shared):
            self._ingest(cache, list(range(len(shared))), [0] * len(shared), shared)
        if self.share_prefixes:
            cache.share_prefixes([len(ids) for ids in shared], group_of_prompt)
        else:
            cache.select_rows(group_of_prompt)
        starts = [len(shared[g]) for g in group_of_prompt]
        rests = [ids[start:] for ids, start in zip(prompts, starts, strict=True)]
        logits = self._ingest(cache, list(range(len(prompts))), starts, rests)
        cache.select_rows(prompt_of_row)
        for row in rows:
            row.length = len(row.prompt_ids)
        return cache, logits.index_select(0, torch.tensor(prompt_of_row, device=self.device))

    def _step(self, cache: RowCache, active: list[_Row]) -> torch.Tensor:
        """Feed every row its pending tokens; returns each row's next-token logits."""
        tokens = torch.tensor([[row.pending[0]] for row in active], device=self.device)
        return self._feed_rest(cache, active, self._feed(cache, active, tokens))

    def _feed(self, cache: RowCache, active: list[_Row], tokens: torch.Tensor) -> torch.Tensor:
        """One forward feeding row j the token tokens[j, 0] at its next position; returns the logits after it (row
        lengths advance in `_feed_rest`)."""
        lengths = [row.length for row in active]
        positions = index_tensor(lengths, self.device)[:, None]
        return self._forward(cache, None, tokens, positions, cache.step_width(lengths))

    def _feed_rest(self, cache: RowCache, active: list[_Row], logits: torch.Tensor) -> torch.Tensor:
        """After `_feed`: feed the rows the rest of their pending tokens (an observation or the note); returns every
        row's next-token logits."""
        for row in active:
            row.length += 1
        extra = [i for i, row in enumerate(active) if len(row.pending) > 1]
        if extra:
            chunks = [active[i].pending[1:] for i in extra]
            fed = self._ingest(cache, extra, [active[i].length for i in extra], chunks)
            logits[torch.tensor(extra, device=self.device)] = fed
            for i, chunk in zip(extra, chunks, strict=True):
                active[i].length += len(chunk)
        for row in active:
            row.pending = []
        return logits

    def _ingest(self, cache: RowCache, where: list[int], starts: list[int], chunks: list[list[int]]) -> torch.Tensor:
        """Feed chunks[j] to cache row where[j], from position starts[j]; returns the logits after each chunk.

        Chunks are left-padded to one width so that every chunk ends at the last input position, and the padded
        inputs are rotated in the cache to the positions after the chunk's real tokens, where they stay masked.
        """
        out = []
        for lo, hi in _spans([len(chunk) for chunk in chunks], _FORWARD_TOKENS):
            width = max(len(chunk) for chunk in chunks[lo:hi])
            ids = torch.tensor([[self._pad] * (width - len(c)) + c for c in chunks[lo:hi]], device=self.device)
            fill = torch.tensor([len(c) for c in chunks[lo:hi]], device=self.device)
            start = torch.tensor(starts[lo:hi], device=self.device)
            offsets = (torch.arange(width, device=self.device)[None, :] - (width - fill)[:, None]) % width
            select = None if where[lo:hi] == list(range(cache.rows)) else where[lo:hi]
            out.append(self._forward(cache, select, ids, start[:, None] + offsets))
        return torch.cat(out)

    def _forward(
        self,
        cache: RowCache,
        select: list[int] | None,
        ids: torch.Tensor,
        positions: torch.Tensor,
        width: int | None = None,
    ) -> torch.Tensor:
        """One forward pass feeding ids[j, i] at position positions[j, i] to cache row select[j] (None: row j);
        returns the logits after each row's last input (`width`: see `RowCache.plan`)."""
        mask = cache.plan(select, positions, width)
        out = self._parts.decoder(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            rollout_cache=cache,  # transformers hands it on to the attention function
        )
        # the head reads one 2-D row per sequence: through transformers' logits_to_keep a bfloat16 prefill went
        # through a batched matmul that copied the head's weights once per sequence
        logits: torch.Tensor = self._parts.head(out.last_hidden_state[:, -1]).float()
        return logits

    def _next_tokens(
        self, logits: torch.Tensor, rows: list[_Row], greedy: bool, generator: torch.Generator | None
    ) -> list[int]:
        """The next token of every row (`rows` lets a subclass script some rows)."""
        return [int(token) for token in self._choose(logits, rows, greedy, generator).tolist()]

    def _choose(
        self, logits: torch.Tensor, rows: list[_Row], greedy: bool, generator: torch.Generator | None
    ) -> torch.Tensor:
        """The next token of every row, on the device (`rows` as in `_next_tokens`)."""
        if greedy:
            return logits.argmax(dim=-1)
        return sample_tokens(logits, self.settings.temperature, self.settings.top_p, generator)

    # -- the protocol ------------------------------------------------------------------------------------------

    def _advance(self, active: list[_Row], tokens: list[int]) -> None:
        """Append each row's new token; close the turns that ended, running all their searches in one call."""
        searches: list[tuple[_Row, str]] = []
        for row, token in zip(active, tokens, strict=True):
            row.response_ids.append(token)
            row.response_mask.append(1)
            row.turn_ids.append(token)
            row.pending = [token]
            row.tail = (row.tail + self._text(token))[-_TAIL_CHARS:]
            if self._turn_over(row, token):
                query = self._end_turn(row)
                if query is not None:
                    searches.append((row, query))
        if searches:
            self._search(searches)

    def _turn_over(self, row: _Row, token: int) -> bool:
        if token in self._eos or len(row.turn_ids) >= self.settings.max_turn_tokens:
            return True
        return any(stop in row.tail for stop in STOP_STRINGS)

    def _end_turn(self, row: _Row) -> str | None:
        """Close a turn: an answer or the final turn ends the rollout; a search returns its query; anything else (no
        action, or an empty query) gets the invalid-action note."""
        row.turns += 1
        text = self.tokenizer.decode(row.turn_ids)
        if row.turns == 1:  # the response prefix opens the first turn: a tag it opens is the model's to close
            text = self.settings.response_prefix + text
        elif row.turns == most_turns(self.settings.max_turns):  # and the final-turn prefix the last one
            text = self.settings.final_turn_prefix + text
        action = parse_action(text)
        closed = row.turn_ids[-1] in self._eos or any(stop in row.tail for stop in STOP_STRINGS)
        cut = len(row.turn_ids) >= self.settings.max_turn_tokens and not closed
        row.turn_ids, row.tail = [], ""
        if rollout_over(action, row.turns, self.settings.max_turns):
            row.answer = action.content if action.kind == "answer" else None
            row.truncated = cut and action.kind != "answer"
            row.done = True
            return None
        if action.kind == "search" and action.content:
            return action.content
        self._observe(row, self._note_ids)
        return None

    def _search(self, searches: list[tuple[_Row, str]]) -> None:
        queries = [query for _, query in searches]
        results = self.retriever.search(queries, self.settings.top_k)
        if len(results) != len(queries):
            raise RuntimeError(f"retriever answered {len(results)} result lists for {len(queries)} queries")
        for (row, _), passages in zip(searches, results, strict=True):
            row.tool_calls += 1
            self._observe(row, self._observation_ids(passages))

    def _observation_ids(self, passages: Sequence[Passage]) -> list[int]:
        """The observation's tokens, cut to max_obs_tokens; a cut one still ends with its closing tag."""
        ids = self._encode(observation(passages))
        limit = self.settings.max_obs_tokens
        if len(ids) <= limit:
            return ids
        closing = self._closing_ids if len(self._closing_ids) < limit else []
        return ids[: limit - len(closing)] + closing

    def _observe(self, row: _Row, ids: list[int]) -> None:
        """Append what the environment answers a turn with and, when the next turn is the final one, what opens it."""
        final = row.turns + 1 == most_turns(self.settings.max_turns)
        self._append(row, ids + self._final_ids if final else ids)

    def _append(self, row: _Row, ids: list[int]) -> None:
        """Append masked tokens (an observation or the note) that the model reads before its next turn."""
        needed = row.length + len(row.pending) + len(ids) + self.settings.max_turn_tokens
        if self._max_context is not None and needed > self._max_context:
            row.done = row.truncated = True
            row.error = f"context window full: the next turn could need {needed} of {self._max_context} positions"
            return
        row.response_ids += ids
        row.response_mask += [0] * len(ids)
        row.pending += ids

    def _text(self, token: int) -> str:
        text = self._texts.get(token)
        if text is None:
            text = self._texts[token] = self.tokenizer.decode([token])
        return text

    def _result(self, row: _Row) -> RolloutSample:
        text = self.settings.response_prefix + self.tokenizer.decode(row.response_ids, skip_special_tokens=True)
        return RolloutSample(
            prompt_ids=list(row.prompt_ids),  # the rows of a group share one list while running
            response_ids=row.response_ids,
            response_mask=row.response_mask,
            response_text=text,
            answer=row.answer,
            tool_calls=row.tool_calls,
            turns=row.turns,
            error=row.error,
            rollout_logprobs=row.rollout_logprobs,
            truncated=row.truncated,
        )

    @contextmanager
    def _generation_mode(self) -> Iterator[None]:
        """The weights rollouts read (refreshed first when they are a copy) in eval mode with grouped attention; the
        model's own settings come back afterwards."""
        model = self.weights.current()
        self._parts = split_causal_lm(model)
        previous = model.config._attn_implementation
        was_training = model.training
        model.set_attn_implementation(GROUPED_SDPA)
        if model.config._attn_implementation != GROUPED_SDPA:
            raise NotImplementedError(f"{type(model).__name__} cannot switch to the engine's attention")
        model.eval()
        try:
            yield
        finally:
            model.set_attn_implementation(previous)
            model.train(was_training)


# -- helpers ---------------------------------------------------------------------------------------------------


def _sampled_logprobs(
    logits: torch.Tensor, rows: list[_Row], tokens: list[int] | torch.Tensor
) -> tuple[list[_Row], list[int], torch.Tensor]:
    """(rows, where each row's token goes in its response, log softmax(logits)[token]) of one decoding step; the
    values stay on the device until `_store_logprobs` reads them all at once."""
    chosen = (tokens if isinstance(tokens, torch.Tensor) else torch.tensor(tokens, device=logits.device))[:, None]
    picked = (logits.gather(1, chosen) - torch.logsumexp(logits, dim=-1, keepdim=True)).squeeze(1)
    return list(rows), [len(row.response_ids) for row in rows], picked


def _store_logprobs(recorded: list[tuple[list[_Row], list[int], torch.Tensor]]) -> None:
    """Give every recorded row its `rollout_logprobs`: the sampled tokens' values, 0.0 on observation tokens."""
    if not recorded:
        return
    values = iter(torch.cat([picked for *_, picked in recorded]).tolist())
    for rows, positions, _ in recorded:
        for row, position in zip(rows, positions, strict=True):
            if row.rollout_logprobs is None:
                row.rollout_logprobs = [0.0] * len(row.response_ids)
            row.rollout_logprobs[position] = next(values)


class _HostCopy:
    """Integers on the device copied to the host without blocking; `read` waits for that copy only (on a GPU, an
    event recorded right after it), not for the work queued behind it."""

    def __init__(self, values: torch.Tensor) -> None:
        self._event: torch.cuda.Event | None = None
        if values.device.type == "cuda":
            self._host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
            self._host.copy_(values, non_blocking=True)
            self._event = torch.cuda.Event()  # type: ignore[no-untyped-call]  # untyped in torch
            self._event.record()
        else:
            self._host = values

    def read(self) -> list[int]:
        if self._event is not None:
            self._event.synchronize()
        return [int(value) for value in self._host.tolist()]


def _shared_prefixes(prompts: list[list[int]], owners: list[str]) -> tuple[list[int], list[list[int]]]:
    """Group prompts by owner (their instruction); returns each prompt's group and each group's longest common
    token prefix, kept at least one token shorter than every prompt of the group."""
    groups: dict[str, int] = {}
    group_of = [groups.setdefault(owner, len(groups)) for owner in owners]
    shared: list[list[int] | None] = [None] * len(groups)
    for ids, group in zip(prompts, group_of, strict=True):
        prefix = shared[group]
        if prefix is None:
            shared[group] = ids[: len(ids) - 1]
            continue
        same = 0
        for a, b in zip(prefix, ids[: len(ids) - 1], strict=False):
            if a != b:
                break
            same += 1
        shared[group] = prefix[:same]
    return group_of, [prefix or [] for prefix in shared]


def _spans(sizes: list[int], budget: int) -> list[tuple[int, int]]:
    """Consecutive [lo, hi) spans whose padded size (rows × longest) stays within budget (at least one row each)."""
    spans = []
    lo, longest = 0, 0
    for i, size in enumerate(sizes):
        longest = max(longest, size)
        if i > lo and (i - lo + 1) * longest > budget:
            spans.append((lo, i))
            lo, longest = i, size
    spans.append((lo, len(sizes)))
    return spans


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """Every end-of-sequence id the tokenizer or the model's generation config names."""
    ids: set[int] = set()
    generation = getattr(model, "generation_config", None)
    for source in (tokenizer.eos_token_id, getattr(generation, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif isinstance(source, list | tuple):
            ids.update(int(i) for i in source)
    return frozenset(ids)
