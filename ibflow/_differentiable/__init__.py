"""Differentiable limit points: gradients of what a flow learns with respect to its
initialization and its data ([THEORY §2.1][theory-2-1] item 5, [§2.3–§2.5][theory-2-3]).

Layer 5 (tasks, see `docs/architecture.md`): on top of `integrate` and the theory's solvers.
"""
