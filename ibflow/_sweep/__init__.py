"""Sweeps: grids of initializations integrated as one compiled, batched, sharded computation.

Public entry point ``ibflow.sweep`` (``engine.py``); grids in ``grid.py``; the results directory
format in ``store.py``.
"""
