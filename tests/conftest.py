import os

# Hermetic tests: ibflow's own cache setting is off (no cache shared between runs; the cache's
# own tests point it at temporary directories; one run's private cache is set up below). Must
# precede `import ibflow`.
os.environ.setdefault("IBFLOW_CACHE_DIR", "off")

# The suite's time is compile time (hundreds of small programs, each run briefly; 42% of the
# suite's worker time is XLA's backend compile, 15% tracing), so tests compile cheaply:
# - XLA's LLVM backend at -O0: measured 216 -> 156-172 CPU-s on a sample of seven tests;
# - XLA's classic CPU fusion emitters instead of the MLIR-based ones (same HLO fusions, other
#   code generator): backend compile of one transform check 16.3 -> 10.5-13 s (3 runs each).
# No fast-math either way (the same IEEE operations); elementwise functions such as exp may
# round differently in the last bit between the two emitters, far below every tolerance here.
# Subprocesses (notebook kernels, the CLI, benchmarks) inherit the flags.
# IBFLOW_TEST_OPTIMIZE=1 tests the default, optimized build.
if os.environ.get("IBFLOW_TEST_OPTIMIZE", "") != "1":
    os.environ["XLA_FLAGS"] = " ".join(filter(None, [
        os.environ.get("XLA_FLAGS", ""), "--xla_backend_optimization_level=0",
        "--xla_cpu_use_fusion_emitters=false"]))

import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402

import ibflow  # noqa: E402,F401  (turns on float64)
from ibflow import _cache  # noqa: E402

# One run's compiled programs are shared by its tests: JAX's persistent compilation cache in a
# directory private to this run (made by the first process that imports this file, inherited by
# the pytest workers, removed when that process exits). The same program recurs in several test
# files (each file ends with `jax.clear_caches()`, below) and on both workers. Nothing outlives
# the run, so runs stay hermetic. About a hundred cache hits out of ~370 compiled
# programs long enough to be written (benchmarks/results/probes.md: the suite's time).
# Subprocesses that tests start (the CLI, notebooks, benchmarks) keep their own settings.
if "IBFLOW_TEST_RUN_CACHE" not in os.environ:
    os.environ["IBFLOW_TEST_RUN_CACHE"] = tempfile.mkdtemp(prefix="ibflow-test-run-")
    atexit.register(shutil.rmtree, os.environ["IBFLOW_TEST_RUN_CACHE"], ignore_errors=True)
jax.config.update("jax_compilation_cache_dir", os.environ["IBFLOW_TEST_RUN_CACHE"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", _cache.MIN_COMPILE_TIME_SECS)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
jax.config.update("jax_compilation_cache_max_size", _cache.MAX_SIZE_BYTES)

jax.config.update("jax_numpy_dtype_promotion", "strict")


@pytest.fixture
def getkey():
    """Fresh, deterministic PRNG keys: ``getkey()`` returns a new key each call."""
    counter = iter(range(10**6))

    def _getkey():
        return jax.random.key(next(counter))

    return _getkey


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's in-memory caches of compiled programs after each test file. A worker runs
    many files; without this its memory grows with every program any earlier file compiled
    (a CI worker once died inside a late, large compile)."""
    yield
    jax.clear_caches()


#: Test files with the longest runs (compiling flows through kinks, benchmark and notebook
#: subprocesses), most expensive first. They are collected first, whole files at a time, so
#: that the workers end on short tests: at the end of a run one worker waits for whatever
#: the other started last, up to a 40–90 s test. (Measured on the 2-core machine, one run
#: each: 995 s in alphabetical order, 985 s in this one; within the machine's drift.)
HEAVY_FILES = ("test_kinks.py", "test_benchmarks_smoke.py", "test_engine.py", "test_sweep.py",
               "test_degenerate_kinks.py", "test_large_models.py", "test_notebooks.py",
               "test_stationary_kinks.py", "test_teacher_student.py", "test_classification.py",
               "test_differentiable.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(HEAVY_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(HEAVY_FILES)))  # stable
