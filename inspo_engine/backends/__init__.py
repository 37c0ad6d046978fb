"""Policy backends: the protocol every backend implements; the torch and verl implementations live in subpackages."""

from .base import PolicyBackend, UpdateResult

__all__ = ["PolicyBackend", "UpdateResult"]
