"""Separable mirror potentials ``Φ(θ) = Σ φ(θ_j − θ_j(0))`` ([THEORY §1][theory-1],
[§3.1][theory-3-1]): the scalar φ families (one file each) and the unscaled / width-scaled ways of
summing them (``scaling.py``).

Layer 0 (foundations, see `docs/architecture.md`): knows no model; imports only `ibflow._checks`.
"""
