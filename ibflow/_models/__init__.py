"""Models: scalar-output Equinox modules of one example, and the optional capabilities they offer
(`base.py`). Layer 4 (models, see `docs/architecture.md`): above the dynamics, the kinks, the
regularizers and the metric fields (each model builds its own reduction, regularizer and metric
field from them), below the formulations, the engine and the theory's solvers, which ask a model
for a capability and never name a concrete model.
"""
