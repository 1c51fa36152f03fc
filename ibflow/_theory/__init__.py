"""Implicit-bias theory: closed-form regularizers and their exact minimizer
([THEORY §2][theory-2])."""
