"""Stand-ins for what cannot run in a unit test: a scripted policy and a Gemini server speaking the REST format.

The scripted policy's success rate depends on the instruction's text, so better instructions really earn more
reward; every draw comes from its own seeded rng, which it saves and restores like a real backend.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from pathlib import Path

from werkzeug import Request, Response

from inspo_engine.checkpoints import POLICY_DIR
from inspo_engine.policy import QuestionResult, UpdateResult
from inspo_engine.types import Question, RolloutRequest, Trajectory

# phrase in the instruction -> (effect on the success rate, the failure it prevents)
SKILLS = {
    "search before answering": (0.30, "answered from memory without searching"),
    "check the passages": (0.20, "trusted a passage that did not mention the entity"),
    "use the exact name": (0.15, "wrote a paraphrase instead of the exact answer"),
}
HARMFUL = {"guess quickly": -0.25}
BASE_RATE = 0.15


def success_rate(instruction: str, updates: int = 0) -> float:
    text = instruction.lower()
    rate = BASE_RATE + 0.001 * updates
    rate += sum(gain for phrase, (gain, _) in SKILLS.items() if phrase in text)
    rate += sum(loss for phrase, loss in HARMFUL.items() if phrase in text)
    return min(0.95, max(0.02, rate))


def questions(n: int) -> list[Question]:
    return [Question(f"q{i:03d}", f"What is the capital of country {i}?", (f"City {i}",)) for i in range(n)]


class ScriptedBackend:
    """A policy whose reward is a Bernoulli draw with a success rate set by the instruction's phrases."""

    name = "scripted"
    computes_in = "fp32"

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.updates = 0
        self.requests: list[list[str]] = []

    def _trajectory(self, instruction_id: str, instruction: str, question: Question) -> Trajectory:
        ok = self.rng.random() < success_rate(instruction, self.updates)
        missing = [why for phrase, (_, why) in SKILLS.items() if phrase not in instruction.lower()]
        answer = question.golden_answers[0] if ok else "Unknown"
        why = "" if ok or not missing else f" The agent {self.rng.choice(missing)}."
        response = f"<think>Looking for {question.text}</think>{why} <answer> {answer} </answer>"
        return Trajectory(
            instruction_id,
            question,
            response,
            1.0 if ok else 0.0,
            answer,
            tool_calls=int(ok),
            response_tokens=len(response.split()),
        )

    def rollout(self, requests: Sequence[RolloutRequest], group_size: int) -> list[list[Trajectory]]:
        self.requests.append([r.instruction_id for r in requests])
        return [
            [self._trajectory(r.instruction_id, r.instruction, r.question) for _ in range(group_size)] for r in requests
        ]

    def update(self, groups: Sequence[Sequence[Trajectory]]) -> UpdateResult:
        self.updates += 1
        return UpdateResult(metrics={"kl": 0.001 * self.updates, "lr": 1e-6}, timings={"update": 0.0})

    def score(self, instruction: str, questions: Sequence[Question]) -> list[float]:
        return [self._trajectory("verify", instruction, q).reward for q in questions]

    def evaluate(self, instruction: str, questions: Sequence[Question]) -> list[QuestionResult]:
        return [QuestionResult.of_trajectory(self._trajectory("eval", instruction, q)) for q in questions]

    def save(self, directory: Path) -> None:
        """Into `policy/` of the checkpoint, where a real backend puts its weights."""
        (directory / POLICY_DIR).mkdir(parents=True, exist_ok=True)
        version, internal, gauss = self.rng.getstate()
        state = {"rng": [version, list(internal), gauss], "updates": self.updates}
        (directory / POLICY_DIR / "scripted.json").write_text(json.dumps(state))

    def load(self, directory: Path) -> None:
        state = json.loads((directory / POLICY_DIR / "scripted.json").read_text())
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.updates = state["updates"]


# -- the optimizer side: Gemini's REST wire format ----------------------------------------------------------------


def gemini_body(text: str, prompt_tokens: int = 100, output_tokens: int = 50) -> dict:
    return {
        "candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {
            "promptTokenCount": prompt_tokens,
            "candidatesTokenCount": output_tokens,
            "totalTokenCount": prompt_tokens + output_tokens,
        },
        "modelVersion": "gemini-2.5-pro",
    }


def prompt_of(request: Request) -> str:
    body = request.get_json()
    return "\n".join(part.get("text", "") for content in body["contents"] for part in content["parts"])


def reflective_answer(prompt: str) -> str:
    """What a good optimizer does: read the failures, name the cause, and fix it — plus some bad ideas."""
    shown = re.findall(r"<ins_0>(.*?)</ins_0>", prompt, re.S)
    base = (
        max(shown, key=len).strip()
        if shown
        else ("Answer with <think> </think> <search> </search> <information> </information> <answer> </answer>.")
    )
    fixes = [phrase for phrase, (_, why) in SKILLS.items() if why in prompt and phrase not in base.lower()]
    lines = [f"<analysis>The failures show the agent {', '.join(fixes) or 'was unlucky'}.</analysis>"]
    ideas = [f"{base} Always {fix}." for fix in fixes]
    ideas += [f"{base} Always {' and '.join(fixes)}."] if len(fixes) > 1 else []
    ideas += [f"{base} If unsure, guess quickly.", base.replace("</search>", "") + " Be brief."]
    ideas += [f"{base} Stay calm ({i})." for i in range(6)]
    lines += [f"<ins_{i}>{idea}</ins_{i}>" for i, idea in enumerate(ideas[:8], start=1)]
    return "\n".join(lines)


def gemini_handler(request: Request) -> Response:
    """A deterministic optimizer behind Gemini's generateContent endpoint."""
    answer = reflective_answer(prompt_of(request))
    return Response(json.dumps(gemini_body(answer)), status=200, content_type="application/json")
