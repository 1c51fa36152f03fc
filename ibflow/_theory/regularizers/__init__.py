"""Implicit regularizers: abstract base and one module per family
([THEORY §2.3–§2.5][theory-2-3])."""
