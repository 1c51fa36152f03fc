"""Variational characterizations of the infinite-width limit of mirror flow on shallow univariate
networks ([THEORY §3.1][theory-3-1] [LM-G][theory-lm-g], [LM-B][theory-lm-b]), discretized on a grid
over the support of ``p_B``.

Layer 5 (tasks, see `docs/architecture.md`): uses the shallow model and the potentials; nothing
below imports it.
"""
