"""Classification flows whose parameter norm diverges ([THEORY §4][theory-4]): the reduced flow of a
two-layer classifier, discrete gradient descent for comparison, and the low-rank/max-margin
diagnostics (stable rank, normalized margins, KKT residual).

Layer 5 (tasks, see `docs/architecture.md`): on top of the engine, the formulations and the
classifier model.
"""
