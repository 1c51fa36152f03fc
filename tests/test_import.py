"""`import ibflow` and the command line's quick answers (--help, --version, usage errors,
``reproduce --list``) import no JAX; float64 is on before any array exists; the heavy optional
libraries load only where they are used. Each check runs in a fresh interpreter (this process
has everything imported already). No timing here: speed lives in benchmarks/."""

import json
import os
import subprocess
import sys

import pytest

HEAVY = ("jax", "jaxlib", "diffrax", "equinox", "matplotlib", "xarray", "sklearn", "scipy",
         "tqdm")


def _fresh(code: str) -> dict:
    """Run `code` in a new interpreter; it ends by printing one JSON object."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("JAX_ENABLE_X64", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


_CLI = """
import contextlib, io, json, sys
from ibflow._cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    code = main({argv!r})
print(json.dumps({{"code": code, "loaded": [m for m in {heavy!r} if m in sys.modules]}}))
"""


@pytest.mark.parametrize("argv, code", [
    (["--help"], 0), (["--version"], 0), (["flow", "--help"], 0),
    (["reproduce", "--help"], 0), (["reproduce", "--list"], 0),
    (["flow", "--scale", "-1"], 2), (["flow", "--k", "9", "--d", "3"], 2),
    (["flow", "--seed", "99999999999999999999"], 2), (["reproduce", "no-such"], 2),
    (["bogus"], 2),
])
def test_quick_cli_answers_import_no_jax(argv, code):
    result = _fresh(_CLI.format(argv=argv, heavy=HEAVY))
    assert result == {"code": code, "loaded": []}


def test_import_ibflow_is_light_and_float64_is_on_before_any_array():
    result = _fresh("""
import json, sys
import ibflow
loaded = [m for m in HEAVY if m in sys.modules]
import jax.numpy as jnp
print(json.dumps({"loaded": loaded, "dtype": str(jnp.ones(2).dtype),
                  "version": ibflow.__version__}))
""".replace("HEAVY", repr(HEAVY)))
    assert result["loaded"] == [] and result["dtype"] == "float64"
    assert result["version"].count(".") == 2


def test_float64_is_turned_on_when_jax_was_imported_first():
    result = _fresh("""
import json
import jax
jax.config.update("jax_enable_x64", False)
import ibflow
import jax.numpy as jnp
print(json.dumps({"dtype": str(jnp.ones(2).dtype)}))
""")
    assert result["dtype"] == "float64"


def test_integrate_loads_the_jax_stack_but_no_plotting_or_tables():
    result = _fresh("""
import json, sys
import ibflow
ibflow.integrate, ibflow.DiagonalNet, ibflow.Solution, ibflow.FlowError, ibflow.data
print(json.dumps({"loaded": [m for m in HEAVY if m in sys.modules]}))
""".replace("HEAVY", repr(HEAVY)))
    assert set(result["loaded"]) == {"jax", "jaxlib", "diffrax", "equinox"}


def test_public_names_resolve_and_unknown_names_raise():
    import ibflow

    for name in ibflow.__all__:
        assert getattr(ibflow, name) is not None
    assert set(ibflow.__all__) <= set(dir(ibflow))
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        ibflow.no_such_name  # noqa: B018
    assert ibflow.FlowError.__module__ == "ibflow"


_CODEGEN = """
import json, os
import ibflow
import jax, jax.numpy as jnp
text = jax.jit(lambda x: jnp.sum(jnp.abs(x) * x, axis=1)).lower(
    jnp.ones((6, 3, 1024))).compile().as_text()
print(json.dumps({"flags": os.environ.get("XLA_FLAGS", ""), "ynn": "__ynn_fusion" in text}))
"""


@pytest.mark.parametrize("env, added", [
    ({}, True),  # added: the reduction is XLA's own
    ({"IBFLOW_XLA_FLAGS": "0"}, False),  # opted out: XLA's default (a YNNPACK fusion)
    ({"XLA_FLAGS": "--xla_cpu_experimental_ynn_fusion_type=eltwise"}, False),  # the user's own
])
def test_cpu_codegen_flag(env, added, monkeypatch):
    """`import ibflow` adds `ibflow.CPU_CODEGEN_FLAG` to XLA_FLAGS before JAX starts its
    backend, and XLA compiles by it; not with ``IBFLOW_XLA_FLAGS=0``, nor over the user's own
    setting of the same option."""
    import ibflow

    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.delenv("IBFLOW_XLA_FLAGS", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = _fresh(_CODEGEN)
    assert (ibflow.CPU_CODEGEN_FLAG in result["flags"]) == added
    if "XLA_FLAGS" in env:
        assert result["flags"] == env["XLA_FLAGS"]  # kept as the user set it
    else:
        assert result["ynn"] == (not added)
