"""OptimizerBudget accounting and the shared retry helper."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inspo_engine.optimizers import Completion, OptimizerBudget, OptimizerError, call_with_retries
from inspo_engine.optimizers.base import MAX_RETRY_AFTER_S, backoff_delay, parse_retry_after


def completion(input_tokens: int, output_tokens: int) -> Completion:
    return Completion(text="x", model="m", input_tokens=input_tokens, output_tokens=output_tokens)


def test_total_tokens_is_input_plus_output() -> None:
    assert completion(7, 3).total_tokens == 10


def test_it_is_exhausted_once_the_call_cap_is_reached() -> None:
    budget = OptimizerBudget(max_calls=2, max_tokens=None)

    budget.charge(completion(1, 1))
    assert not budget.exhausted()
    budget.charge(completion(1, 1))

    assert budget.exhausted()
    assert (budget.calls, budget.tokens) == (2, 4)


def test_it_is_exhausted_once_the_token_cap_is_reached() -> None:
    budget = OptimizerBudget(max_calls=None, max_tokens=100)

    budget.charge(completion(60, 39))
    assert not budget.exhausted()
    budget.charge(completion(1, 0))

    assert budget.exhausted()


def test_a_failed_call_counts_as_a_call_but_costs_no_tokens() -> None:
    budget = OptimizerBudget(max_calls=1, max_tokens=10)

    budget.charge_failure()

    assert (budget.calls, budget.tokens) == (1, 0)
    assert budget.exhausted()


def test_a_zero_cap_is_exhausted_from_the_start() -> None:
    assert OptimizerBudget(max_calls=0, max_tokens=None).exhausted()
    assert OptimizerBudget(max_calls=None, max_tokens=0).exhausted()


def test_negative_caps_are_rejected() -> None:
    with pytest.raises(ValueError, match="max_calls"):
        OptimizerBudget(max_calls=-1, max_tokens=None)


def test_state_round_trips_through_json() -> None:
    budget = OptimizerBudget(max_calls=50, max_tokens=None, calls=3, tokens=1234)

    state = json.loads(json.dumps(budget.to_state()))

    assert state == {"max_calls": 50, "max_tokens": None, "calls": 3, "tokens": 1234}
    assert OptimizerBudget.from_state(state) == budget


@given(usage=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), max_size=50))
def test_it_is_never_exhausted_without_caps(usage: list[tuple[int, int]]) -> None:
    budget = OptimizerBudget(max_calls=None, max_tokens=None)
    for input_tokens, output_tokens in usage:
        budget.charge(completion(input_tokens, output_tokens))
        budget.charge_failure()

    assert not budget.exhausted()
    assert budget.calls == 2 * len(usage)
    assert budget.tokens == sum(a + b for a, b in usage)


@given(
    max_calls=st.none() | st.integers(0, 20),
    max_tokens=st.none() | st.integers(0, 500),
    usage=st.lists(st.none() | st.tuples(st.integers(0, 50), st.integers(0, 50)), max_size=30),
)
def test_exhaustion_matches_the_caps_and_survives_a_round_trip(
    max_calls: int | None, max_tokens: int | None, usage: list[tuple[int, int] | None]
) -> None:
    budget = OptimizerBudget(max_calls=max_calls, max_tokens=max_tokens)
    for item in usage:
        if item is None:
            budget.charge_failure()
        else:
            budget.charge(completion(*item))

    over_calls = max_calls is not None and budget.calls >= max_calls
    over_tokens = max_tokens is not None and budget.tokens >= max_tokens
    assert budget.exhausted() == (over_calls or over_tokens)
    restored = OptimizerBudget.from_state(budget.to_state())
    assert restored == budget
    assert restored.exhausted() == budget.exhausted()


class Flaky:
    """Fails with the given exceptions in turn, then answers."""

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "ok"


def test_call_with_retries_backs_off_exponentially_until_it_succeeds() -> None:
    fn, sleeps = Flaky(TimeoutError(), TimeoutError(), TimeoutError()), list[float]()

    result = call_with_retries(fn, is_retryable=lambda e: True, max_retries=3, backoff_s=2.0, sleep=sleeps.append)

    assert result == "ok"
    assert sleeps == [2.0, 4.0, 8.0]


def test_call_with_retries_wraps_a_non_retryable_error_at_once() -> None:
    fn, sleeps = Flaky(KeyError("bad")), list[float]()

    with pytest.raises(OptimizerError, match="not retryable") as raised:
        call_with_retries(fn, is_retryable=lambda e: False, max_retries=5, backoff_s=1.0, sleep=sleeps.append)

    assert isinstance(raised.value.__cause__, KeyError)
    assert (fn.calls, sleeps) == (1, [])


def test_call_with_retries_lets_an_optimizer_error_through_untouched() -> None:
    original = OptimizerError("empty answer")
    fn, sleeps = Flaky(original), list[float]()

    with pytest.raises(OptimizerError) as raised:
        call_with_retries(fn, is_retryable=lambda e: True, max_retries=5, backoff_s=1.0, sleep=sleeps.append)

    assert raised.value is original
    assert (fn.calls, sleeps) == (1, [])


def test_call_with_retries_with_zero_retries_tries_once() -> None:
    fn, sleeps = Flaky(TimeoutError()), list[float]()

    with pytest.raises(OptimizerError, match="1 attempts"):
        call_with_retries(fn, is_retryable=lambda e: True, max_retries=0, backoff_s=1.0, sleep=sleeps.append)

    assert (fn.calls, sleeps) == (1, [])


def test_a_server_requested_wait_is_honoured_but_clipped() -> None:
    assert backoff_delay(0, 2.0, retry_after_s=30.0) == 30.0
    assert backoff_delay(3, 2.0, retry_after_s=1.0) == 16.0
    assert backoff_delay(0, 2.0, retry_after_s=10_000.0) == MAX_RETRY_AFTER_S


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("5", 5.0), (" 2.5 ", 2.5), (None, None), ("Wed, 21 Oct 2015 07:28:00 GMT", None), ("-1", None), ("nan", None)],
)
def test_retry_after_headers_are_read_as_seconds(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header) == seconds
