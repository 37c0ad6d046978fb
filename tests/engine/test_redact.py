"""Secret values masked in whatever a run stores or logs: every string of an event however deep, a log record's
message, arguments and traceback."""

from __future__ import annotations

import logging

from inspo_engine.events import CandidateInfo, InstructionProposed, ListSink, RunFailed, TrackerFailed
from inspo_engine.redact import MASK, RedactingSink, Redactor, redacted_logging

KEY = "sk-live-0123456789"


def test_every_string_of_an_event_is_masked_however_deep():
    candidates = [CandidateInfo(f"use {KEY}", True, reason=f"r {KEY}")]
    event = InstructionProposed(
        step=1, round_id="r", round=1, proposer="reflection", parent_id="i0", critique=f"c {KEY}",
        failures=[{"response": f"x {KEY}", "nested": [KEY]}], candidates=candidates, optimizer_model="m",
        input_tokens=1, output_tokens=1,
    )  # fmt: skip
    sink = ListSink()
    RedactingSink(sink, Redactor([KEY])).emit(event)
    (masked,) = sink.events
    assert KEY not in str(masked.to_dict()) and masked.critique == f"c {MASK}"
    assert masked.failures == [{"response": f"x {MASK}", "nested": [MASK]}]
    assert masked.candidates[0].text == f"use {MASK}"
    assert masked.time == event.time and masked.step == 1


def test_the_longest_secret_is_masked_first_and_short_values_are_left_alone():
    redactor = Redactor(["abc", "token-123", "token-123-extended", None, ""])
    assert redactor.text("token-123-extended token-123 abc") == f"{MASK} {MASK} abc"


def test_an_event_without_secrets_is_passed_on_unchanged():
    sink = ListSink()
    event = TrackerFailed(step=2, tracker="mlflow", error="MLflow at http://m answered HTTP 500")
    RedactingSink(sink, Redactor([])).emit(event)
    assert sink.events == [event]


def test_log_lines_of_every_logger_are_masked_while_the_block_runs(caplog):
    caplog.set_level(logging.INFO)
    with redacted_logging(Redactor([KEY])):
        logging.getLogger("httpx").info("header %s", KEY)
        try:
            raise RuntimeError(f"failed with {KEY}")
        except RuntimeError:
            logging.getLogger("x").exception("it failed")
        RedactingSink(ListSink(), Redactor([KEY])).emit(RunFailed(step=1, error=KEY))
    assert KEY not in caplog.text and f"header {MASK}" in caplog.text and f"failed with {MASK}" in caplog.text
    logging.getLogger("httpx").info("after %s", KEY)
    assert f"after {KEY}" in caplog.text  # the filter is gone with the block
