"""The backends' names for the PolicyBackend protocol and its results, which live in `inspo_engine.policy` (the core
declares what it needs of a backend; the backends implement it), and for the checkpoint's `policy/` directory."""

from ..checkpoints import POLICY_DIR
from ..policy import PolicyBackend, QuestionResult, UpdateResult

__all__ = ["POLICY_DIR", "PolicyBackend", "QuestionResult", "UpdateResult"]
