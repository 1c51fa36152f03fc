"""Variational characterizations of the infinite-width limit of mirror flow on shallow univariate
networks (THEORY §3.1 [LM-G], [LM-B]), discretized on a grid over the support of ``p_B``."""
