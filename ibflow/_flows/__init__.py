"""Flows: the geometry (gradient, mirror, warped, log-loss clock) that turns a loss gradient into a
velocity. Layer 1 (pieces, see `docs/architecture.md`): built on the potentials; knows no model
class, dynamics or engine.
"""
