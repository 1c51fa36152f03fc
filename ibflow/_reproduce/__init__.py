"""Reproductions of published figures, listed in `registry.REPRODUCTIONS`.

Layer 6 (orchestration, see `docs/architecture.md`): uses the public tasks and sweeps; nothing
below imports it."""

from .registry import REPRODUCTIONS as REPRODUCTIONS, Reproduction as Reproduction

# Each reproduction's module is imported when it runs (registry.Reproduction.run), so that
# `ibflow reproduce --list` needs no JAX.
