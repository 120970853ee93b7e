"""Transforms on the RLX graph (each result is checked by the verifier)."""
from .rewrite import Appender, dce, substitute, users

__all__ = ["Appender", "dce", "substitute", "users"]
