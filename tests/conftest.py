"""Shared fixtures: the real embedded model, loaded once per test session."""

from __future__ import annotations

import os

import pytest

# keep CPU threads low: tests run beside other processes on a 2-core machine
os.environ.setdefault("OMP_NUM_THREADS", "1")


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
