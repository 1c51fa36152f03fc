"""The package's architecture, checked on its source with `ast` (no import of ibflow needed).

1. The import graph of ``ibflow/`` has no cycle, every import goes down (or sideways within) the
   layering of `LAYERS` (the order `docs/architecture.md` and each subpackage's docstring state),
   no function body imports an ibflow module (such an import exists to hide a cycle), and nothing
   inside ``ibflow/`` imports the root package ``ibflow``.
2. No ``isinstance(x, C)`` with ``C`` a concrete (non-``Abstract``) class of ibflow outside the
   module that defines ``C``: generic code asks for a capability (an abstract class), it does not
   list the classes it knows.

`PENDING` names each remaining violation in a file another change owns; it only shrinks, and a
violation that disappears must be removed from it (the test says so).
"""

import ast
import collections
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "ibflow"

#: Layers, lowest first; a module belongs to the layer of its longest matching prefix and may
#: import only modules of its own layer or of lower ones.
LAYERS = (
    # 0. foundations: validation, status, the result base, leaf helpers and small strategy
    #    families that know no model (activations, potentials, losses), the one damped Newton
    #    loop and its compacting while loop.
    ("ibflow._checks", "ibflow._status", "ibflow._errors", "ibflow._result",
     "ibflow._interpolants", "ibflow._activations", "ibflow._potentials", "ibflow._losses",
     "ibflow._progress", "ibflow._cache", "ibflow._programs", "ibflow._models._init",
     "ibflow._version",
     "ibflow._newton", "ibflow._batching", "ibflow._solver_step", "ibflow._lapack",
     "ibflow._leg_solver"),
    # 1. pieces a model or a dynamics is built from: flows (geometries), regularizers, metric
    #    fields, the tail's structured Jacobians, step budgets and stiffness estimates.
    ("ibflow._flows", "ibflow._theory.regularizers", "ibflow._theory.metrics",
     "ibflow._tail.jacobian", "ibflow._tail.chord", "ibflow._tail.budget",
     "ibflow._tail.stiffness"),
    # 2. dynamics: the ODEs the engine integrates, smooth ...
    ("ibflow._dynamics",),
    # 3. ... and switching (through kinks).
    ("ibflow._kinks",),
    # 4. models: each brings its own capabilities (reduction, regularizer, metric field).
    ("ibflow._models",),
    # 5. tasks that ask models for capabilities: formulations, the engine and its tail, the flow
    #    entry points, the theory's solvers, variational limits, descent, differentiable limits,
    #    classification; data sets (a synthetic set may label by a teacher model).
    ("ibflow.data", "ibflow._formulation", "ibflow._solution", "ibflow._segments",
     "ibflow._engine", "ibflow._tail",
     "ibflow._integrate", "ibflow._theory", "ibflow._variational", "ibflow._discrete",
     "ibflow._differentiable", "ibflow._classification"),
    # 6. orchestration and the public surface.
    ("ibflow._sweep", "ibflow._reproduce", "ibflow._cli", "ibflow"),
)

#: Function-body imports of ibflow modules that are not about cycles: the CLI imports JAX and
#: the library only once a command needs them (start-up time of ``ibflow --help``), and the root
#: package enables the compilation cache on the first use of a JAX name (its lazy loader).
LAZY_ALLOWED = {"ibflow._cli", "ibflow"}

#: The clients of the public API, each a module or a package (with its submodules): they use the
#: library through the root package ``ibflow`` and ``ibflow.data``, as a user's script does. The
#: command line imports it lazily (start-up time of ``ibflow --help``), the reproductions at the
#: top of each module.
PUBLIC_CLIENTS = {"ibflow._cli", "ibflow._reproduce"}

#: Private modules that make up the client layer itself (the version is a leaf the command line
#: prints before anything else is imported).
CLIENT_LAYER = PUBLIC_CLIENTS | {"ibflow._version"}

#: Private modules a public client still imports, each with why no public name serves:
#: (client in `PUBLIC_CLIENTS`, private module) -> reason. Only shrinks (a fixed one must go).
CLIENT_PRIVATE_IMPORTS = {
    ("ibflow._cli", "ibflow._status"):
        "STATUS_NAMES: the name of a Status item (the JSON's status_name); no public equivalent",
    ("ibflow._reproduce", "ibflow._status"):
        "STATUS_NAMES: the name of a Status item (stored in the JSON); no public equivalent",
    ("ibflow._cli", "ibflow._progress"):
        "close_open_bars before the summary is printed; progress bars have no public API",
    ("ibflow._reproduce", "ibflow._progress"):
        "a bar over seeds and the 'compiling' line (teacher-student); no public API",
    ("ibflow._cli", "ibflow._checks"):
        "square_loss_floor: the loss below which a square loss is roundoff; not public",
    ("ibflow._cli", "ibflow._activations.relu"):
        "leaky_relu for the leaky neuron's labels (public equivalent: ibflow.LeakyReLU(slope))",
}

#: Remaining violations in files owned by other changes, to be emptied: (rule, module, detail).
PENDING: set = set()


def _name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in sorted(ROOT.rglob("*.py"))}
TREES = {m: ast.parse(p.read_text(encoding="utf-8")) for m, p in MODULES.items()}


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The ibflow modules an import statement names: ``from .. import _checks`` is the module
    ``ibflow._checks``, ``from .base import X`` is ``<package>.base``."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "ibflow"]
    if node.level == 0:
        if not (node.module or "").startswith("ibflow"):
            return []
        base = node.module
    else:
        package = module.split(".")
        if MODULES[module].name != "__init__.py":
            package = package[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join(package + ([node.module] if node.module else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def _imports():
    """``(module, target, in_function)`` for every import of an ibflow module."""
    out = []
    for module, tree in TREES.items():
        nested = {id(n) for f in ast.walk(tree)
                  if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                  for n in ast.walk(f) if isinstance(n, ast.Import | ast.ImportFrom)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                out += [(module, t, id(node) in nested) for t in _targets(module, node)]
    return out


IMPORTS = _imports()


def _layer(module: str) -> int:
    best = max((p for layer in LAYERS for p in layer
                if module == p or module.startswith(p + ".")), key=len)
    return next(i for i, layer in enumerate(LAYERS) if best in layer)


def _package_of(module: str) -> str:
    """The top-level subpackage (or module) below ``ibflow`` that holds ``module``."""
    return ".".join(module.split(".")[:2])


def _found(rule: str, violations: set) -> set:
    """The violations of `rule` not in `PENDING`; fails on a `PENDING` entry that is fixed."""
    stale = {v for v in PENDING if v[0] == rule} - violations
    assert not stale, f"fixed, remove from PENDING: {sorted(stale)}"
    return violations - PENDING


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            nxt = next((t for t in it if t in edges), None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        comp.append(top)
                        if top == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif nxt not in index:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                on_stack.add(nxt)
                work.append((nxt, iter(sorted(edges[nxt]))))
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
    return out


def test_every_module_has_a_layer():
    for module in MODULES:
        _layer(module)  # raises ValueError (empty max) for a module no layer names


def test_import_graph_has_no_cycle():
    """Module-level imports, plus the package ``__init__`` that importing a submodule runs
    (``from .._tail.jacobian import X`` executes ``ibflow/_tail/__init__.py`` first)."""
    edges = collections.defaultdict(set)
    for module in MODULES:
        edges[module]
    for module, target, in_function in IMPORTS:
        if in_function or target == "ibflow":
            continue
        parts = target.split(".")
        for k in range(2, len(parts) + 1):
            ancestor = ".".join(parts[:k])
            if ancestor in MODULES and ancestor != module and not module.startswith(
                    ancestor + "."):
                edges[module].add(ancestor)
    assert _cycles(edges) == []


def test_no_upward_import():
    found = {("upward import", m, _package_of(t)) for m, t, _ in IMPORTS
             if t in MODULES and _layer(t) > _layer(m)}
    assert _found("upward import", found) == set()


def test_no_import_inside_a_function():
    found = {("lazy import", m, t) for m, t, in_function in IMPORTS
             if in_function and m not in LAZY_ALLOWED}
    assert _found("lazy import", found) == set()


def test_no_import_of_the_root_package():
    found = {("root import", m, t) for m, t, _ in IMPORTS
             if t == "ibflow" and m != "ibflow" and _client(m) is None}
    assert _found("root import", found) == set()


def _within(module: str, names) -> str | None:
    """The entry of `names` that is `module` or a package holding it (None if there is none)."""
    return next((n for n in names if module == n or module.startswith(n + ".")), None)


def _client(module: str) -> str | None:
    """The entry of `PUBLIC_CLIENTS` that `module` belongs to, or None."""
    return _within(module, PUBLIC_CLIENTS)


def _private(module: str) -> bool:
    """Whether an ibflow module is private: a part of its dotted name below ``ibflow`` starts
    with ``_`` (``ibflow.data`` is public, ``ibflow.data._digits`` is not)."""
    return any(part.startswith("_") for part in module.split(".")[1:])


def test_public_clients_use_the_public_api():
    """A public client (and each of its submodules) imports no private module of ibflow, in a
    function body or not, except those of the client layer and `CLIENT_PRIVATE_IMPORTS`."""
    found = {(_client(m), t) for m, t, _ in IMPORTS
             if _client(m) is not None and _private(t) and _within(t, CLIENT_LAYER) is None}
    stale = set(CLIENT_PRIVATE_IMPORTS) - found
    assert not stale, f"fixed, remove from CLIENT_PRIVATE_IMPORTS: {sorted(stale)}"
    assert found - set(CLIENT_PRIVATE_IMPORTS) == set()


def _concrete_classes() -> dict[str, set[str]]:
    """Class name -> the modules defining a concrete (non-``Abstract``) class of that name."""
    out = collections.defaultdict(set)
    for module, tree in TREES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("Abstract"):
                out[node.name].add(module)
    return out


def _class_names(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Tuple):
        return [n for e in node.elts for n in _class_names(e)]
    if isinstance(node, ast.BinOp):  # X | Y
        return _class_names(node.left) + _class_names(node.right)
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    return []


def test_no_isinstance_on_a_concrete_class_outside_its_module():
    concrete = _concrete_classes()
    found = set()
    for module, tree in TREES.items():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "isinstance" and len(node.args) == 2):
                for name in _class_names(node.args[1]):
                    if name in concrete and module not in concrete[name]:
                        found.add(("isinstance", module, name))
    assert _found("isinstance", found) == set()


def test_each_subpackage_states_its_layer():
    """Each subpackage's docstring says where it sits in `LAYERS` (the word "Layer")."""
    found = {("layer docstring", m, "") for m, p in MODULES.items()
             if p.name == "__init__.py" and m != "ibflow"
             and "Layer" not in (ast.get_docstring(TREES[m]) or "")}
    assert _found("layer docstring", found) == set()


#: The longest a function may be, in lines of code (blank lines, comments and its docstring
#: not counted; nested functions count towards the function that holds them).
MAX_FUNCTION_LINES = 80


def _code_lines(function, lines):
    doc = function.body[0]
    skip = set()
    if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(
            doc.value.value, str):
        skip = set(range(doc.lineno, doc.end_lineno + 1))
    return sum(1 for i in range(function.lineno, function.end_lineno + 1)
               if i not in skip and lines[i - 1].strip()
               and not lines[i - 1].strip().startswith("#"))


def test_no_function_is_longer_than_80_lines():
    long = {}
    for module, tree in TREES.items():
        lines = MODULES[module].read_text().splitlines()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                count = _code_lines(node, lines)
                if count > MAX_FUNCTION_LINES:
                    long[f"{module}.{node.name}"] = count
    assert long == {}


def test_one_solve_loop():
    """Every flow goes through one segment loop: ``ibflow/_segments.py`` holds the only
    ``diffeqsolve`` call of the package (a smooth flow is its one-mode case; a phase change
    continues it with another solver)."""
    calls = collections.Counter()
    for module, tree in TREES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (
                    getattr(node.func, "attr", None) == "diffeqsolve"
                    or getattr(node.func, "id", None) == "diffeqsolve"):
                calls[module] += 1
    assert dict(calls) == {"ibflow._segments": 1}
