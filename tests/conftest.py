import jax
import pytest

import ibflow  # noqa: F401  (turns on float64)

jax.config.update("jax_numpy_dtype_promotion", "strict")


@pytest.fixture
def getkey():
    """Fresh, deterministic PRNG keys: ``getkey()`` returns a new key each call."""
    counter = iter(range(10**6))

    def _getkey():
        return jax.random.key(next(counter))

    return _getkey
