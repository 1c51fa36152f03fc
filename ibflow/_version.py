"""The package version: one leaf module, read by ``ibflow/__init__.py``, by sweeps (recorded in
``sweep.json``) and by hatch at build time (``[tool.hatch.version]`` in pyproject.toml)."""

__version__ = "0.1.0"
