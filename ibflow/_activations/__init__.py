"""Activations for `TwoLayerNet`: small strategy Modules, one file per family member.

Layer 0 (foundations, see `docs/architecture.md`): knows no model; imports only `ibflow._checks`.
"""
