"""The implicit tail: structured Jacobians and the root finder that uses them
([THEORY §8.1][theory-8-1])."""
