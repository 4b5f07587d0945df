"""Shared test setup: small, deterministic, CPU-only."""

import pytest
import torch

torch.set_num_threads(1)  # tiny models: more threads only add overhead


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    """One token/tokenizer cache for every CLI test in the session."""
    return tmp_path_factory.mktemp("cache")
