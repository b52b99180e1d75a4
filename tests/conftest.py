import pytest

from simulator.config.hardware import load_hardware


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
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="a soak test: run it with --soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)
