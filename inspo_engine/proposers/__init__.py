"""Proposers: the optimizer prompts for new candidate instructions and the parsing of its replies; no model calls."""

from inspo_engine.proposers.parsing import (
    REQUIRED_TAGS,
    ParsedProposal,
    RejectedCandidate,
    missing_tags,
    parse_proposal,
    required_tags,
)
from inspo_engine.proposers.prompts import (
    OPTIMIZER_SYSTEM_PROMPT,
    PROPOSER_KINDS,
    RESPONSE_CHAR_LIMIT,
    FailureExample,
    ProposerKind,
    ScoredInstruction,
    build_prompt,
    history_prompt,
    paraphrase_prompt,
    reflection_prompt,
    truncate_middle,
)

__all__ = [
    "OPTIMIZER_SYSTEM_PROMPT",
    "PROPOSER_KINDS",
    "REQUIRED_TAGS",
    "RESPONSE_CHAR_LIMIT",
    "FailureExample",
    "ParsedProposal",
    "ProposerKind",
    "RejectedCandidate",
    "ScoredInstruction",
    "build_prompt",
    "history_prompt",
    "missing_tags",
    "paraphrase_prompt",
    "parse_proposal",
    "reflection_prompt",
    "required_tags",
    "truncate_middle",
]
