"""Implicit-bias theory: closed-form regularizers and their exact minimizer
([THEORY §2][theory-2]).

Layer 5 (tasks, see `docs/architecture.md`): the solvers (`implicit_bias`, `minimize_regularizer`,
the Hessian-map test, the NTK) ask models for capabilities; `regularizers/` and `metrics.py` sit in
layer 1, below the models that build them.
"""
