"""Reproductions of published figures; each module registers itself on import."""

from .registry import REPRODUCTIONS as REPRODUCTIONS, register as register

# One import line per reproduction module:
from . import stable_rank as _stable_rank  # noqa: E402, F401
from . import mirror as mirror  # noqa: E402,F401  (issue 5)
from . import shape_scale as shape_scale  # noqa: E402
from . import q_figures as q_figures  # noqa: E402
from . import optimize_shape as optimize_shape  # noqa: E402  (issue 8)
from . import teacher_student as teacher_student  # noqa: E402,F401  (issue 11)
