"""The servers the tests run against: started by kbq's test harness
(tests/it/clients.rs, through `scripts/test`), and named here by environment variables."""

import os

import pytest

import kbq


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.exit(f"{name} is not set: run these tests through kbq's tests/it/clients.rs", 2)
    return value


@pytest.fixture(scope="session")
def url() -> str:
    """A kbq with the demo knowledge base and the built-in provider."""
    return _env("KBQ_TEST_URL")


@pytest.fixture(scope="session")
def key() -> str:
    """A key with every scope."""
    return _env("KBQ_TEST_KEY")


@pytest.fixture(scope="session")
def read_key() -> str:
    """A key with the `read` scope only."""
    return _env("KBQ_TEST_READ_KEY")


@pytest.fixture(scope="session")
def limited_url() -> str:
    """A kbq whose budgets give one graph request and one chat per second, burst 1."""
    return _env("KBQ_TEST_LIMITED_URL")


@pytest.fixture(scope="session")
def deprecated_url() -> str:
    """A kbq whose v1 is deprecated, with a sunset date."""
    return _env("KBQ_TEST_DEPRECATED_URL")


@pytest.fixture
def client(url, key):
    with kbq.Client(base_url=url, api_key=key) as c:
        yield c


@pytest.fixture
async def aclient(url, key):
    async with kbq.AsyncClient(base_url=url, api_key=key) as c:
        yield c
