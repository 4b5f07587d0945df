import pytest


@pytest.fixture(scope="session")
def cache(tmp_path_factory):
    """One token/tokenizer cache for every CLI test in the session."""
    return tmp_path_factory.mktemp("cache")
