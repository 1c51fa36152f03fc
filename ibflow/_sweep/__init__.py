"""Sweeps: grids of initializations integrated as one compiled, batched, sharded computation.

Public entry point ``ibflow.sweep`` (``sweep.py``), gluing a pure plan (``plan.py``), the results
directory (``store.py``), the compiled batch runner (``executor.py``) and the results with their
labeled view (``result.py``); grids in ``grid.py``, member-ordering strategies in ``order.py``.

Layer 6 (orchestration, see `docs/architecture.md`): on top of ``integrate``, the models and the
data sets; nothing below imports it.
"""
