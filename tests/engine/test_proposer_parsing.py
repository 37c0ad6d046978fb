"""Tests for parsing and validating optimizer replies into candidate instructions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inspo_engine.proposers import (
    REQUIRED_TAGS,
    ParsedProposal,
    RejectedCandidate,
    missing_tags,
    parse_proposal,
    required_tags,
)

PARENT = (
    "Answer the question below. Think step by step inside <think> and </think> every time you receive new "
    "information. If you are missing knowledge, search by writing <search> your query </search>; the search engine "
    "returns the top passages between <information> and </information>. You may search as many times as you need. "
    "When you are confident, give only the final short answer inside <answer> and </answer>, for example "
    "<answer> Paris </answer>."
)

C1 = (
    "Answer the question below. Before every step, reason inside <think> and </think>. When a fact is missing, "
    "issue one focused query with <search> your query </search>; results arrive between <information> and "
    "</information>. Check that the passages really support your answer, then give only the short final answer "
    "inside <answer> and </answer>."
)
C2 = (
    "You are a careful research assistant. Think in <think> </think> after each new piece of evidence. Break "
    "multi-hop questions into single facts and look each one up with <search> query </search>; read the passages "
    "in <information> </information> closely. Put just the entity or phrase inside <answer> </answer>."
)
C3 = (
    "Solve the question by alternating reasoning and retrieval. Reason inside <think> and </think>; whenever "
    "anything is uncertain, search with <search> query </search> and study the passages between <information> and "
    "</information>. Rephrase and retry when a search misses. Finish with a concise answer inside <answer> and "
    "</answer>, e.g. <answer> Paris </answer>."
)
C4 = (
    "Work like a fact-checker. Reason in <think> </think>, verify every claim with <search> query </search>, "
    "and trust only what the <information> </information> passages state. Answer in <answer> </answer> with "
    "as few words as possible."
)

ANALYSIS = (
    "In failure 1 the agent answered from memory without searching, because the instruction says to search only "
    "'if you are missing knowledge'. In failure 2 it found the right passage but wrote a full sentence as the answer."
)

WELL_FORMED = f"""<analysis>
{ANALYSIS}
</analysis>
<ins_1>
{C1}
</ins_1>
<ins_2>
{C2}
</ins_2>
<ins_3>
{C3}
</ins_3>"""

CHATTY = f"""Sure! Let me look at what went wrong first.

<analysis>{ANALYSIS}</analysis>

Based on this analysis, here are three improved instructions.

**Candidate 1** focuses on verification:
<ins_1>{C1}</ins_1>

The second one breaks questions apart:

<ins_2>
{C2}
</ins_2>
And finally, a version that encourages retrying:
<ins_3>
{C3}
</ins_3>

I hope these help! Let me know if you want more variations."""

FENCED_WHOLE = f"""Here is my answer:

```xml
<analysis>
{ANALYSIS}
</analysis>

<ins_1>
{C1}
</ins_1>

<ins_2>
{C2}
</ins_2>
```"""

FENCED_CANDIDATES = f"""<analysis>{ANALYSIS}</analysis>
<ins_1>
```
{C1}
```
</ins_1>
<ins_2>
```text
{C2}
```
</ins_2>"""

ECHOED_PARENT = f"""The original instruction was:
<ins_0>
{PARENT}
</ins_0>
It never asks the agent to verify its answer.
<ins_1>{C1}</ins_1>
<ins_2>{C2}</ins_2>"""

NO_CLOSING_TAGS = f"""<analysis>{ANALYSIS}</analysis>
<ins_1>
{C1}

<ins_2>
{C2}
</ins_2>
<ins_3>
{C3}
"""


def _parse(text: str, n: int = 3, parent: str = PARENT) -> ParsedProposal:
    return parse_proposal(text, parent=parent, n=n)


def _reasons(proposal: ParsedProposal) -> list[str]:
    return [rejected.reason for rejected in proposal.rejected]


# --- required_tags / missing_tags ---------------------------------------------------------------------------------


def test_required_tags_lists_every_protocol_tag_of_the_standard_instruction_in_canonical_order() -> None:
    assert required_tags(PARENT) == REQUIRED_TAGS


def test_required_tags_counts_a_tag_used_only_in_its_closing_form() -> None:
    assert required_tags("Close your reasoning with </think>, then answer.") == ("think",)


def test_required_tags_is_empty_for_an_instruction_without_tags() -> None:
    assert required_tags("Answer the question as briefly as you can.") == ()


def test_missing_tags_reports_absent_forms_in_tag_order_opening_before_closing() -> None:
    candidate = "Reason in <think> </think>, then answer in <answer>."
    assert missing_tags(candidate, ("think", "search", "answer")) == ["<search>", "</search>", "</answer>"]


def test_missing_tags_is_empty_when_every_form_is_present() -> None:
    assert missing_tags(C1, REQUIRED_TAGS) == []


# --- well-formed and chatty replies -------------------------------------------------------------------------------


def test_it_extracts_the_analysis_and_every_candidate_from_a_well_formed_reply() -> None:
    proposal = _parse(WELL_FORMED)
    assert proposal == ParsedProposal(critique=ANALYSIS, candidates=(C1, C2, C3), rejected=())


def test_it_ignores_prose_before_between_and_after_the_tags() -> None:
    proposal = _parse(CHATTY)
    assert proposal.candidates == (C1, C2, C3)
    assert proposal.critique == ANALYSIS
    assert proposal.rejected == ()


def test_it_reads_a_reply_wrapped_in_a_markdown_code_fence() -> None:
    proposal = _parse(FENCED_WHOLE, n=2)
    assert proposal.candidates == (C1, C2)
    assert proposal.critique == ANALYSIS


def test_it_strips_code_fences_around_individual_candidates() -> None:
    assert _parse(FENCED_CANDIDATES, n=2).candidates == (C1, C2)


@pytest.mark.parametrize(
    ("opening", "closing"),
    [
        ("**<ins_{k}>**", "**</ins_{k}>**"),
        ("<ins_{k} >", "</ins_{k} >"),
        ("<INS_{k}>", "</INS_{k}>"),
        ("< ins_{k} >", "< /ins_{k} >"),
        ("<Ins-{k}>", "</Ins-{k}>"),
        ("<ins_{k}>", "<\\/ins_{k}>"),
    ],
)
def test_it_accepts_bold_spaced_uppercase_and_escaped_tag_variants(opening: str, closing: str) -> None:
    body = "\n".join(f"{opening.format(k=k)}\n{c}\n{closing.format(k=k)}" for k, c in enumerate((C1, C2, C3), 1))
    assert _parse(body).candidates == (C1, C2, C3)


def test_it_accepts_bold_tags_sitting_on_the_same_line_as_the_candidate() -> None:
    text = f"**<ins_1>** {C1} **</ins_1>**\n**<ins_2>**{C2}**</ins_2>**"
    assert _parse(text, n=2).candidates == (C1, C2)


# --- missing or mismatched closing tags ---------------------------------------------------------------------------


def test_a_candidate_with_no_closing_tag_runs_until_the_next_opening_tag() -> None:
    proposal = _parse(NO_CLOSING_TAGS)
    assert proposal.candidates == (C1, C2, C3)
    assert proposal.rejected == ()


def test_a_last_candidate_with_no_closing_tag_stops_at_the_fence_that_closes_the_reply() -> None:
    text = f"```\n<ins_1>\n{C1}\n</ins_1>\n<ins_2>\n{C2}\n```\nThese should do better."
    assert _parse(text, n=2).candidates == (C1, C2)


def test_an_unclosed_fenced_candidate_keeps_everything_up_to_its_own_closing_fence() -> None:
    text = f"<ins_1>\n```\n{C1}\n```\nWhy: it adds verification."
    assert _parse(text, n=1).candidates == (C1,)


def test_a_last_candidate_with_no_closing_tag_runs_to_the_end_of_the_reply() -> None:
    text = f"<ins_1>{C1}</ins_1>\n<ins_2>\n{C2}\n\n"
    assert _parse(text, n=2).candidates == (C1, C2)


def test_a_closing_tag_with_the_wrong_number_still_ends_the_candidate() -> None:
    text = f"<ins_1>{C1}</ins_1>\n<ins_2>{C2}</ins_1>\nNote: both keep the tags.\n<ins_3>{C3}</ins_3>"
    proposal = _parse(text)
    assert proposal.candidates == (C1, C2, C3)
    assert proposal.rejected == ()


def test_a_stray_closing_tag_outside_any_candidate_is_ignored() -> None:
    text = f"</ins_1>\n<ins_1>{C1}</ins_1></ins_1>\n<ins_2>{C2}</ins_2>"
    assert _parse(text, n=2).candidates == (C1, C2)


# --- echoes, duplicates, parent copies -----------------------------------------------------------------------------


def test_it_ignores_an_echoed_parent_block() -> None:
    proposal = _parse(ECHOED_PARENT, n=2)
    assert proposal.candidates == (C1, C2)
    assert proposal.rejected == ()


def test_an_unclosed_echo_of_the_parent_is_ignored_too() -> None:
    text = f"<ins_0>\n{PARENT}\n<ins_1>\n{C1}\n</ins_1>"
    assert _parse(text, n=1) == ParsedProposal(critique="", candidates=(C1,), rejected=())


def test_it_rejects_a_later_duplicate_after_whitespace_and_case_normalisation() -> None:
    shouted = "  " + C1.replace("Answer the question below.", "ANSWER  the\nQuestion   BELOW.") + "\n  "
    proposal = _parse(f"<ins_1>{C1}</ins_1><ins_2>{C2}</ins_2><ins_3>{shouted}</ins_3>")
    assert proposal.candidates == (C1, C2)
    assert proposal.rejected == (RejectedCandidate(text=shouted.strip(), reason="duplicate of candidate 1"),)


def test_a_duplicate_names_the_block_it_repeats_even_after_a_rejected_block() -> None:
    broken = C1.replace("</search>", "")
    proposal = _parse(f"<ins_1>{broken}</ins_1><ins_2>{C2}</ins_2><ins_3>{C2}</ins_3>")
    assert proposal.candidates == (C2,)
    assert _reasons(proposal) == ["missing </search>", "duplicate of candidate 2"]


def test_it_rejects_a_candidate_identical_to_the_parent() -> None:
    reworded_spacing = PARENT.replace(". ", ".\n\n")
    proposal = _parse(f"<ins_1>{reworded_spacing}</ins_1><ins_2>{C2}</ins_2>", n=2)
    assert proposal.candidates == (C2,)
    assert _reasons(proposal) == ["identical to the parent"]


# --- counts and order ----------------------------------------------------------------------------------------------


def test_it_returns_fewer_candidates_than_asked_without_error() -> None:
    proposal = _parse(f"<analysis>{ANALYSIS}</analysis><ins_1>{C1}</ins_1>", n=4)
    assert proposal.candidates == (C1,)
    assert proposal.rejected == ()


def test_it_rejects_valid_candidates_beyond_n() -> None:
    proposal = _parse(WELL_FORMED + f"\n<ins_4>{C4}</ins_4>", n=2)
    assert proposal.candidates == (C1, C2)
    assert proposal.rejected == (
        RejectedCandidate(text=C3, reason="more than 2 candidates"),
        RejectedCandidate(text=C4, reason="more than 2 candidates"),
    )


def test_invalid_candidates_do_not_count_towards_n() -> None:
    text = f"<ins_1></ins_1><ins_2>{C2}</ins_2><ins_3>{PARENT}</ins_3><ins_4>{C4}</ins_4>"
    proposal = _parse(text, n=2)
    assert proposal.candidates == (C2, C4)
    assert _reasons(proposal) == ["empty", "identical to the parent"]


def test_it_keeps_textual_order_when_numbering_is_out_of_order() -> None:
    text = f"<ins_3>{C3}</ins_3>\n<ins_1>{C1}</ins_1>\n<ins_2>{C2}</ins_2>"
    assert _parse(text).candidates == (C3, C1, C2)


def test_it_keeps_every_block_when_a_number_is_repeated() -> None:
    text = f"<ins_1>{C1}</ins_1>\n<ins_1>{C2}</ins_1>\n<ins_2>{C3}</ins_2>"
    assert _parse(text).candidates == (C1, C2, C3)


# --- candidate clean-up --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wrapped",
    [
        f'"{C1}"',
        f"'{C1}'",
        f"\u201c{C1}\u201d",
        f'"""{C1}"""',
        f"Instruction: {C1}",
        f"Instruction 1: {C1}",
        f"**Instruction 1:** {C1}",
        f"**New instruction**: {C1}",
        f'Improved prompt: "{C1}"',
        f"Candidate #1:\n\n{C1}",
        f"  \n\t{C1}\n\n  ",
        f"---\n{C1}\n---",
    ],
)
def test_it_strips_wrapping_quotes_labels_and_surrounding_whitespace(wrapped: str) -> None:
    assert _parse(f"<ins_1>{wrapped}</ins_1>", n=1).candidates == (C1,)


def test_it_keeps_quotes_and_bold_text_inside_a_candidate() -> None:
    inner = C1.replace("Check that", 'Say "unknown" only after two searches. **Check** that')
    assert _parse(f"<ins_1>{inner}</ins_1>", n=1).candidates == (inner,)


# --- validation against the parent ---------------------------------------------------------------------------------


def test_it_rejects_a_candidate_that_drops_the_closing_search_tag() -> None:
    broken = C2.replace("</search>", "")
    proposal = _parse(f"<ins_1>{C1}</ins_1><ins_2>{broken}</ins_2>", n=2)
    assert proposal.candidates == (C1,)
    assert proposal.rejected == (RejectedCandidate(text=broken, reason="missing </search>"),)


def test_the_rejection_reason_lists_every_missing_tag_form() -> None:
    broken = C3.replace("</search>", "").replace("<information>", "")
    proposal = _parse(f"<ins_1>{broken}</ins_1>", n=1)
    assert _reasons(proposal) == ["missing </search>, <information>"]


def test_tag_forms_must_match_exactly() -> None:
    shouted = C1.replace("<think>", "<THINK>")
    assert _reasons(_parse(f"<ins_1>{shouted}</ins_1>", n=1)) == ["missing <think>"]


def test_it_only_requires_the_tags_the_parent_uses() -> None:
    parent = "Reason inside <think> and </think>, then answer inside <answer> and </answer>."
    candidate = "Think it through in <think> </think> first; reply with just the answer in <answer> </answer>."
    proposal = parse_proposal(f"<ins_1>{candidate}</ins_1>", parent=parent, n=1)
    assert proposal.candidates == (candidate,)


def test_a_parent_without_tags_requires_none() -> None:
    proposal = parse_proposal("<ins_1>Answer briefly.</ins_1>", parent="Answer the question.", n=1)
    assert proposal.candidates == ("Answer briefly.",)


def test_it_rejects_an_absurdly_long_candidate() -> None:
    bloated = C1 + " Always double-check." * 250
    proposal = _parse(f"<ins_1>{bloated}</ins_1><ins_2>{C2}</ins_2>", n=2)
    assert proposal.candidates == (C2,)
    assert _reasons(proposal) == ["too long"]


def test_a_long_candidate_is_accepted_while_it_stays_under_four_thousand_characters() -> None:
    long = C1 + " Always double-check." * 150
    assert 4 * len(PARENT) < len(long) < 4000
    assert _parse(f"<ins_1>{long}</ins_1>", n=1).candidates == (long,)


def test_a_candidate_over_four_thousand_characters_is_accepted_for_a_long_parent() -> None:
    parent = PARENT + " Be thorough." * 200
    long = C1 + " Always double-check." * 250
    assert len(long) > 4000
    assert parse_proposal(f"<ins_1>{long}</ins_1>", parent=parent, n=1).candidates == (long,)


def test_it_rejects_an_empty_candidate() -> None:
    proposal = _parse(f"<ins_1>  \n ``` \n```\n</ins_1><ins_2>{C2}</ins_2>", n=2)
    assert proposal.candidates == (C2,)
    assert proposal.rejected == (RejectedCandidate(text="", reason="empty"),)


# --- critique ------------------------------------------------------------------------------------------------------


def test_the_critique_falls_back_to_the_prose_before_the_first_candidate() -> None:
    text = f"The instruction never asks for verification.\n\n```xml\n<ins_1>{C1}</ins_1>\n```\nDone."
    assert _parse(text, n=1).critique == "The instruction never asks for verification."


def test_the_fallback_critique_drops_the_list_marker_left_before_the_first_candidate() -> None:
    heading = "## Analysis\nThe instruction is vague.\n\n## New instructions"
    text = f"{heading}\n\n1. <ins_1>{C1}</ins_1>\n2. <ins_2>{C2}</ins_2>"
    proposal = _parse(text, n=2)
    assert proposal.critique == heading
    assert proposal.candidates == (C1, C2)


def test_the_critique_omits_an_echoed_parent() -> None:
    proposal = _parse(ECHOED_PARENT, n=2)
    assert proposal.critique == "The original instruction was:\n\nIt never asks the agent to verify its answer."


def test_an_unclosed_analysis_ends_at_the_first_candidate() -> None:
    text = f"<analysis>\n{ANALYSIS}\n\n<ins_1>{C1}</ins_1>"
    proposal = _parse(text, n=1)
    assert proposal.critique == ANALYSIS
    assert proposal.candidates == (C1,)


def test_the_analysis_may_come_after_the_candidates() -> None:
    text = f"<ins_1>{C1}</ins_1>\n<analysis>{ANALYSIS}</analysis>"
    proposal = _parse(text, n=1)
    assert proposal.critique == ANALYSIS
    assert proposal.candidates == (C1,)


def test_tags_mentioned_inside_the_analysis_are_not_taken_as_candidates() -> None:
    analysis = "I will write <ins_1> as a stricter version and <ins_2> as a shorter one; <ins_0> lacks verification."
    proposal = _parse(f"<analysis>{analysis}</analysis>\n<ins_1>{C1}</ins_1>\n<ins_2>{C2}</ins_2>", n=2)
    assert proposal.candidates == (C1, C2)
    assert proposal.rejected == ()
    assert "stricter version" in proposal.critique


def test_candidates_placed_inside_the_analysis_are_still_found() -> None:
    text = f"<analysis>\n{ANALYSIS}\n<ins_1>{C1}</ins_1>\n<ins_2>{C2}</ins_2>\n</analysis>"
    proposal = _parse(text, n=2)
    assert proposal.candidates == (C1, C2)
    assert proposal.critique == ANALYSIS


def test_a_reply_without_candidates_gives_an_empty_proposal_with_the_critique() -> None:
    text = "I'm sorry, but I cannot improve this instruction any further; it already covers every case."
    assert _parse(text) == ParsedProposal(critique=text, candidates=(), rejected=())


def test_a_reply_with_only_an_analysis_keeps_the_analysis() -> None:
    assert _parse(f"<analysis>{ANALYSIS}") == ParsedProposal(critique=ANALYSIS, candidates=(), rejected=())


def test_the_critique_is_empty_when_the_reply_is_only_candidates() -> None:
    assert _parse(f"<ins_1>{C1}</ins_1>", n=1).critique == ""


def test_an_empty_reply_gives_an_empty_proposal() -> None:
    assert _parse("") == ParsedProposal(critique="", candidates=(), rejected=())


def test_it_refuses_n_below_one() -> None:
    with pytest.raises(ValueError, match="n must be at least 1"):
        _parse(WELL_FORMED, n=0)


# --- properties ----------------------------------------------------------------------------------------------------

_WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789 ,.;!?()\n", min_size=0, max_size=60)


@st.composite
def _valid_candidate(draw: st.DrawFn) -> str:
    pieces = [draw(_WORDS) for _ in range(5)]
    forms = ["<think> ", " </think>", " <search> query </search> ", " <information> ", " </information> "]
    body = "".join(piece + form for piece, form in zip(pieces, forms, strict=True))
    return f"Z{body}<answer> x </answer>{draw(_WORDS)}Z"


def _distinct(candidates: list[str]) -> bool:
    keys = [" ".join(c.split()).casefold() for c in candidates]
    return len(set(keys)) == len(keys)


_OPENINGS = st.sampled_from(["<ins_{k}>", "<INS_{k}>", "< ins_{k} >", "**<ins_{k}>**", "<ins_{k}>\n```\n"])
_CLOSINGS = {
    "<ins_{k}>": "</ins_{k}>",
    "<INS_{k}>": "</INS_{k}>",
    "< ins_{k} >": "</ ins_{k} >",
    "**<ins_{k}>**": "**</ins_{k}>**",
    "<ins_{k}>\n```\n": "\n```\n</ins_{k}>",
}


@settings(max_examples=150, deadline=None)
@given(
    candidates=st.lists(_valid_candidate(), min_size=1, max_size=6).filter(_distinct),
    opening=_OPENINGS,
    prose=_WORDS,
    fence_all=st.booleans(),
    drop_last_closing=st.booleans(),
)
@pytest.mark.slow
def test_valid_candidates_formatted_into_tags_round_trip(
    candidates: list[str], opening: str, prose: str, fence_all: bool, drop_last_closing: bool
) -> None:
    closing = _CLOSINGS[opening]
    blocks = [f"{opening.format(k=k)}{c}{closing.format(k=k)}" for k, c in enumerate(candidates, start=1)]
    if drop_last_closing:
        blocks[-1] = f"{opening.format(k=len(candidates))}{candidates[-1]}"
    text = f"<analysis>{prose}</analysis>\n" + f"\n{prose}\n".join(blocks)
    if fence_all:
        text = f"```xml\n{text}\n```"
    proposal = parse_proposal(text, parent=PARENT, n=len(candidates))
    assert proposal.candidates == tuple(candidates)
    assert proposal.rejected == ()
    assert proposal.critique == prose.strip()


_TAG_SOUP = st.lists(
    st.one_of(
        st.sampled_from(
            [
                "<ins_0>",
                "</ins_0>",
                "<ins_1>",
                "</ins_1>",
                "< INS_2 >",
                "</ins_3>",
                "<ins>",
                "</ins>",
                "<analysis>",
                "</analysis>",
                "```",
                "```xml\n",
                "**",
                '"',
                "Instruction 1:",
                "<think>",
                "</think>",
                "<search>",
                "</search>",
                "<answer>",
                "</answer>",
                "<information>",
                "</information>",
                "\n",
                " ",
                C1,
                PARENT,
            ]
        ),
        st.text(max_size=20),
    ),
    max_size=40,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(), _TAG_SOUP), n=st.integers(min_value=1, max_value=5))
@pytest.mark.slow
def test_parse_proposal_never_raises_and_keeps_its_invariants(text: str, n: int) -> None:
    proposal = parse_proposal(text, parent=PARENT, n=n)
    assert isinstance(proposal.critique, str)
    assert len(proposal.candidates) <= n
    assert _distinct(list(proposal.candidates))
    for candidate in proposal.candidates:
        assert missing_tags(candidate, REQUIRED_TAGS) == []
        assert " ".join(candidate.split()).casefold() != " ".join(PARENT.split()).casefold()
        assert candidate == candidate.strip()
    assert all(rejected.reason for rejected in proposal.rejected)


@settings(max_examples=100, deadline=None)
@given(candidates=st.lists(_valid_candidate(), min_size=1, max_size=6).filter(_distinct))
@pytest.mark.slow
def test_accepted_candidates_survive_a_second_parse_unchanged(candidates: list[str]) -> None:
    first = parse_proposal("".join(f"<ins_{k}>{c}</ins_{k}>" for k, c in enumerate(candidates, 1)), parent=PARENT, n=6)
    again = "".join(f"<ins_{k}>{c}</ins_{k}>" for k, c in enumerate(first.candidates, 1))
    assert parse_proposal(again, parent=PARENT, n=6).candidates == first.candidates
