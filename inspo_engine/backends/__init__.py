"""Policy backends: torch/ (one process, CPU or one GPU) and verl/ (a GPU cluster), each an implementation of the
`inspo_engine.policy.PolicyBackend` protocol; the core never imports them."""

from ..policy import PolicyBackend, UpdateResult

__all__ = ["PolicyBackend", "UpdateResult"]
