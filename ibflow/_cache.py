"""JAX's persistent compilation cache, turned on when ibflow is imported.

A flow compiles a Diffrax solve with an event, two solver phases and a vmapped grid: seconds of
XLA compilation that every new process (a second ``ibflow reproduce``, a new notebook kernel)
would pay again. With the persistent cache the compiled executables are written to disk and a
later process with the same program, shapes, JAX version and device loads them instead.

Directory, in order of precedence:

1. a cache directory the user already gave JAX (``JAX_COMPILATION_CACHE_DIR`` or
   ``jax.config.update("jax_compilation_cache_dir", ...)`` before ``import ibflow``) is kept
   untouched, and so are its thresholds;
2. ``$IBFLOW_CACHE_DIR``; the empty string, ``off``, ``0``, ``false`` or ``none`` disable the
   cache (ibflow then changes no JAX setting);
3. ``$XDG_CACHE_HOME/ibflow/jax``, by default ``~/.cache/ibflow/jax``.

The directory is bounded at 2 GiB (least recently used entries are evicted), which also makes
JAX lock it across processes.
"""

import os
from pathlib import Path

import jax

#: Values of ``IBFLOW_CACHE_DIR`` that turn the cache off (compared lower-case, stripped).
DISABLED = ("", "off", "0", "false", "no", "none")
#: Compilations faster than this are not written: JAX compiles every eager operation (tens of
#: milliseconds each), and caching those would fill the directory with entries that are as
#: cheap to recompile as to load. ibflow's solves take seconds.
MIN_COMPILE_TIME_SECS = 0.05
#: Size bound of the cache directory. A bound also turns on JAX's inter-process file lock around
#: every read and write (``filelock``): without it, two processes sharing the directory (pytest
#: workers, parallel reproductions) can read an entry while another writes it, and JAX turns the
#: failed read into a warning (an error under ``filterwarnings = error``).
MAX_SIZE_BYTES = 2 * 1024**3


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/ibflow/jax``, or ``~/.cache/ibflow/jax`` when XDG_CACHE_HOME is unset."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ibflow" / "jax"


def cache_dir_from_environment() -> Path | None:
    """The directory ibflow would use, from ``IBFLOW_CACHE_DIR`` / ``XDG_CACHE_HOME``; None if
    ``IBFLOW_CACHE_DIR`` disables the cache."""
    value = os.environ.get("IBFLOW_CACHE_DIR")
    if value is None:
        return default_cache_dir()
    if value.strip().lower() in DISABLED:
        return None
    return Path(os.path.expanduser(value))


def enable_compilation_cache() -> str | None:
    """Point JAX's persistent compilation cache at ibflow's directory, unless the user already
    configured one or disabled it. Returns the directory in use (the user's, if they set one),
    or None when the cache is off. Never raises: a directory that cannot be created leaves the
    cache off."""
    configured = jax.config.jax_compilation_cache_dir
    if configured:
        return configured
    path = cache_dir_from_environment()
    if path is None:
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    jax.config.update("jax_compilation_cache_dir", str(path))
    # Cache ibflow's compilations (seconds each) but not the eager ops; no size floor (JAX's
    # default of 0 lets it pick a filesystem-dependent minimum entry size).
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_TIME_SECS)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    jax.config.update("jax_compilation_cache_max_size", MAX_SIZE_BYTES)
    return str(path)
