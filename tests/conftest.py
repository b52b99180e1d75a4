import os

import pytest

from simulator.config.hardware import load_hardware
from simulator.step_cache import ENV, OFF

# Every test simulates what it checks, in this process and in the commands it starts: a run
# kept from an earlier test or an earlier suite would not exercise the engine. The cache's own
# tests (test_step_cache.py) give it a folder of their own.
os.environ[ENV] = OFF


@pytest.fixture(scope="session")
def tiny():
    return load_hardware("tiny")


@pytest.fixture(scope="session")
def ascend():
    return load_hardware("ascend910")


def pytest_addoption(parser):
    parser.addoption(
        "--soak",
        action="store_true",
        help="also run the soak tests: 2,000 drawn whole-model requests (an hour or two)",
    )


def pytest_collection_modifyitems(config, items):
    # the slow tests first, so that the workers share them out rather than one worker
    # taking the last long test while the others have finished (a stable sort: every worker
    # collects the same order, as pytest-xdist requires)
    items.sort(key=lambda item: "slow" not in item.keywords)
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="a soak test: run it with --soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)
