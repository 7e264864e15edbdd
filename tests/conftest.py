"""Shared pytest configuration."""
import numpy as np
import pytest


@pytest.fixture
def rng():
    """A fresh seeded generator per test (reproducible, never zeros)."""
    return np.random.default_rng(20261122)
