"""Reproductions of published figures; each module registers itself on import."""

from .registry import REPRODUCTIONS as REPRODUCTIONS, register as register

# One import line per reproduction module:
