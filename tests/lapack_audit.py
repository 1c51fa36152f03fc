"""Which LAPACK calls of a lowered program XLA could run at once (`ibflow._lapack`).

XLA runs the operations of one computation (a function body, a loop body, a branch) as soon as
their operands are ready, so two operations in the same block run at once unless one of them
needs, through the block's data flow, a value the other computes. `concurrent_lapack_calls`
walks the StableHLO module (MLIR's Python bindings): per block, every operation that contains a
LAPACK or BLAS custom call (directly, in a nested region, or through a called function), and
every pair of them with no data path between them, values used inside nested regions
included. An ``optimization_barrier``'s result k counts as its operand k, not as all of its
operands: the CPU runtime schedules by buffers, and a barrier's results are its operands'
buffers, so a barrier orders nothing at run time (`ibflow._lapack`)."""

from jax.extend.mlir import ir

from ibflow._lapack import is_lapack_call


def concurrent_lapack_calls(module) -> list[tuple[str, str, str]]:
    """``(block, location of one call, location of the other)`` for each pair of LAPACK calls
    in one block of `module` (``jax.stages.Lowered.compiler_ir("stablehlo")``) that XLA could
    run at once."""
    functions = {ir.StringAttr(op.attributes["sym_name"]).value: op
                 for op in module.body.operations if op.operation.name == "func.func"}
    known: dict[str, bool] = {}

    def nested(op):
        return (inner for region in op.regions for block in region.blocks
                for inner in block.operations)

    def has_lapack(op) -> bool:
        name = op.operation.name
        if name == "stablehlo.custom_call":
            return is_lapack_call(ir.StringAttr(op.attributes["call_target_name"]).value)
        if name in ("func.call", "call"):
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            if callee not in known:
                known[callee] = False  # (no recursion in a lowered program)
                known[callee] = any(has_lapack(inner) for inner in nested(functions[callee]))
            return known[callee]
        return any(has_lapack(inner) for inner in nested(op))

    def used(op, into):
        into.extend(op.operands)
        for inner in nested(op):
            used(inner, into)
        return into

    pairs = []
    passes = {}  # a barrier's result -> its operand

    def source(value):
        while value in passes:
            value = passes[value]
        return value

    def visit(block, where):
        ops = list(block.operations)
        for op in ops:
            if op.operation.name == "stablehlo.optimization_barrier":
                passes.update(zip(op.results, op.operands))
        made_by = {result: i for i, op in enumerate(ops) for result in op.results
                   if op.operation.name != "stablehlo.optimization_barrier"}
        before: list[set[int]] = []  # per operation, the operations of this block it needs
        for i, op in enumerate(ops):
            needs = set()
            for value in used(op, []):
                j = made_by.get(source(value))
                if j is not None and j < i:
                    needs |= {j} | before[j]
            before.append(needs)
        calls = [i for i, op in enumerate(ops) if has_lapack(op)]
        pairs.extend((where, str(ops[i].location), str(ops[j].location))
                     for a, i in enumerate(calls) for j in calls[a + 1:] if i not in before[j])
        for op in ops:
            for region in op.regions:
                for inner in region.blocks:
                    visit(inner, f"{where}/{op.operation.name}")

    for name, function in functions.items():
        for region in function.regions:
            for block in region.blocks:
                visit(block, name)
    return pairs
