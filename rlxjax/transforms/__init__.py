"""Transforms on the RLX graph (each result is checked by the verifier)."""
from .recognize_norms import recognize_norms
from .rewrite import Appender, dce, substitute, users

__all__ = ["Appender", "dce", "recognize_norms", "substitute", "users"]
