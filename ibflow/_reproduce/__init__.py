"""Reproductions of published figures, listed in `registry.REPRODUCTIONS`."""

from .registry import REPRODUCTIONS as REPRODUCTIONS, Reproduction as Reproduction

# Each reproduction's module is imported when it runs (registry.Reproduction.run), so that
# `ibflow reproduce --list` needs no JAX.
