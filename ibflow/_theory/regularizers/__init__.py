"""Implicit regularizers: abstract base and one module per family
([THEORY §2.3–§2.5][theory-2-3]).

Layer 1 (pieces, see `docs/architecture.md`), with `ibflow._theory.metrics`: knows no model; models
build their regularizer from these classes.
"""
