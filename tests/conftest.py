"""Shared fixtures: the real embedded model, loaded once per test session."""

from __future__ import annotations

import os

import pytest
import pytest_lsp
from lsp_client import SERVER, Session, start
from pytest_lsp import LanguageClient

from lab.replay import no_daemon_env

# keep CPU threads low: tests run beside other processes on a 2-core machine
os.environ.setdefault("OMP_NUM_THREADS", "1")
# a daemon the developer started (`fsm-complete daemon start`) is never asked by the tests' commands and
# servers: the socket they look for is in a private folder of this session where nothing listens (the
# daemon's own tests set theirs)
os.environ["FSM_COMPLETE_SOCKET"] = no_daemon_env()["FSM_COMPLETE_SOCKET"]


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run the long variants (fuzz, storms)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="long variant: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def engine():
    from engine.complete import Engine

    eng = Engine()
    eng.load()
    yield eng
    eng.save_tables()


# one real server per test module and client flavour (VS Code's and Neovim's capabilities), for the
# end-to-end LSP tests that ask for ``session``
@pytest_lsp.fixture(config=SERVER, scope="module", params=["visual_studio_code", "neovim"])
async def client(lsp: LanguageClient, request):
    lsp.session = await start(lsp, request.param)
    yield
    await lsp.shutdown_session()


@pytest.fixture(scope="module")
def session(client) -> Session:
    return client.session
