"""The implicit tail: structured Jacobians and the root finder that uses them
([THEORY §8.1][theory-8-1]).

Layer 1 and Layer 5 (see `docs/architecture.md`): the structured Jacobians, the chord, the step
budget and the stiffness estimate (`jacobian`, `chord`, `budget`, `stiffness`) are pieces the
dynamics are built from (layer 1); the equilibrium Newton tail and the rest are tasks beside the
engine that runs them (layer 5)."""
