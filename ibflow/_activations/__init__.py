"""Activations for `TwoLayerNet`: small strategy Modules, one file per family member."""
