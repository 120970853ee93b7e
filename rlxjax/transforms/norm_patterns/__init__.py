"""Analysis and classification behind :mod:`rlxjax.transforms.recognize_norms`."""
from .analysis import Analysis, Elem, Stat
from .classify import Candidate, candidates

__all__ = ["Analysis", "Candidate", "Elem", "Stat", "candidates"]
