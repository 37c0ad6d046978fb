"""Generate → verify at the paper's numbers: verification rejects candidates worse than their parent and refills the
free slots in further rounds; with several parents every parent gets proposals."""

import json
import re

import pytest
from werkzeug import Request, Response

from inspo_engine.coevolution import CoEvolution
from inspo_engine.config import RunConfig
from inspo_engine.events import EvolutionCompleted, InstructionProposed, InstructionVerified, ListSink
from inspo_engine.evolution import slot_shares
from inspo_engine.optimizers import GeminiClient, HttpSettings

from .fakes import ScriptedBackend, gemini_body, prompt_of, questions, success_rate

GENERATE = "/v1beta/models/gemini-2.5-pro:generateContent"

# The paper's INSPO numbers (N_P = 7, N_parent = 1, N = 6, |D_B| = 200, 5 rounds, K_e = 15), one evolution.
PAPER = {
    "seed": 5,
    "grpo": {"total_steps": 15, "group_size": 5, "batch_size": 64, "mini_batch_size": 64, "micro_batch_size": 64},
    "population": {"population_size": 7, "n_parents": 1, "paraphrase_init": False},
    "evolution": {"evolve_every": 15, "evolve_until": 15},
    "optimizer": {"max_retries": 0},
}


class ExactScorer(ScriptedBackend):
    """The scripted policy, but verification scores are its exact success rate (no sampling noise)."""

    def score(self, instruction, questions):
        hits = round(success_rate(instruction, self.updates) * len(questions))
        return [1.0] * hits + [0.0] * (len(questions) - hits)


def scripted_optimizer(httpserver, answers):
    """A Gemini-format server answering call k with answers[k](parent); it records which parent each call showed."""
    shown: list[str] = []

    def handler(request: Request) -> Response:
        parent = max(re.findall(r"<ins_0>\s*(.*?)\s*</ins_0>", prompt_of(request), re.S), key=len)
        shown.append(parent)
        ideas = answers[min(len(shown), len(answers)) - 1](parent)
        body = "<analysis>What went wrong.</analysis>\n" + "\n".join(
            f"<ins_{i}>{idea}</ins_{i}>" for i, idea in enumerate(ideas, start=1)
        )
        return Response(json.dumps(gemini_body(body)), status=200, content_type="application/json")

    httpserver.expect_request(GENERATE, method="POST").respond_with_handler(handler)
    client = GeminiClient(
        HttpSettings(api_key="test-key", base_url=httpserver.url_for("/"), max_retries=0, timeout_s=10)
    )
    return client, shown


def good(parent, n=6, tag="a"):
    return [f"{parent} Always search before answering ({tag}{i})." for i in range(n)]


def good_again(parent):
    return good(parent, tag="b")


def half_bad(parent):
    return good(parent, 3) + [f"{parent} If unsure, guess quickly ({i})." for i in range(3)]


def run(config, client, backend=None):
    sink = ListSink()
    loop = CoEvolution(
        config,
        backend=backend or ExactScorer(seed=config.seed),
        train_questions=questions(640),
        optimizer=client,
        sink=sink,
    )
    loop.run()
    return loop, sink


def test_the_paper_preset_rejects_candidates_below_their_parent():
    assert RunConfig().evolution.verify_min_ratio == 1.0
    assert (RunConfig().population.population_size, RunConfig().evolution.n_candidates) == (7, 6)


@pytest.mark.slow
def test_at_n_p_7_and_n_6_a_candidate_below_its_parent_is_rejected_and_a_second_round_refills(httpserver):
    config = RunConfig.from_dict(PAPER)
    client, shown = scripted_optimizer(httpserver, [half_bad, good_again])
    loop, sink = run(config, client)

    (evolution,) = sink.of(EvolutionCompleted)
    assert evolution.rounds == 2 and len(shown) == 2
    verdicts = [c for event in sink.of(InstructionVerified) for c in event.candidates]
    assert len(verdicts) == 12
    parent_score = sink.of(InstructionVerified)[0].parent_score
    assert parent_score == pytest.approx(success_rate(config.population.seed_instruction, updates=15), abs=0.01)
    harmful = [c for c in verdicts if "guess quickly" in c.text]
    assert len(harmful) == 3 and not any(c.accepted for c in harmful)
    assert all(c.score < parent_score and "below the bar" in (c.reason or "") for c in harmful)
    kept = [c for c in verdicts if c.accepted]
    assert len(kept) == 6 and all(c.score >= parent_score for c in kept)
    assert len(loop.population) == 7
    assert not any("guess quickly" in m.text for m in loop.population.members)


@pytest.mark.slow
def test_without_verification_the_same_proposals_let_harmful_candidates_join(httpserver):
    config = RunConfig.from_dict(PAPER).with_overrides({"evolution.verify": False})
    client, shown = scripted_optimizer(httpserver, [half_bad, good])
    loop, sink = run(config, client)

    assert len(shown) == 1 and sink.of(EvolutionCompleted)[0].rounds == 1
    assert not sink.of(InstructionVerified)
    assert sum("guess quickly" in m.text for m in loop.population.members) == 3


@pytest.mark.slow
def test_rounds_stop_at_max_verify_rounds_when_nothing_clears_the_bar(httpserver):
    config = RunConfig.from_dict(PAPER)
    bad = lambda parent: [f"{parent} If unsure, guess quickly ({i})." for i in range(6)]  # noqa: E731
    client, shown = scripted_optimizer(httpserver, [bad])
    loop, sink = run(config, client)

    assert sink.of(EvolutionCompleted)[0].rounds == config.evolution.max_verify_rounds == 5
    assert len(shown) == 5
    assert [m.origin for m in loop.population.members] == ["seed"]  # nothing joined: the population is unchanged


@pytest.mark.parametrize(("n_parents", "shares"), [(2, [3, 2]), (3, [2, 1, 1])])
@pytest.mark.slow
def test_every_parent_gets_proposals_and_its_share_of_the_slots(httpserver, n_parents, shares):
    tags = "<think></think> <search></search> <information></information> <answer></answer>"
    config = RunConfig.from_dict(PAPER).with_overrides(
        {
            "population.n_parents": n_parents,
            "population.initial_instructions": [f"Manual A {tags}", f"Manual B {tags}"],
            "population.prune": False,
        }
    )
    client, _ = scripted_optimizer(httpserver, [good])
    loop, sink = run(config, client)

    proposed = sink.of(InstructionProposed)
    parents = sink.of(EvolutionCompleted)[0].parent_ids
    assert len(parents) == n_parents
    assert {event.parent_id for event in proposed} == set(parents)
    children = [m for m in loop.population.members if m.parent_id in parents]
    by_parent = [sum(child.parent_id == parent for child in children) for parent in parents]
    assert by_parent == shares == slot_shares(7 - n_parents, n_parents)
