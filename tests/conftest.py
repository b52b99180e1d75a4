import pytest

from simulator.config.hardware import load_hardware


@pytest.fixture(scope="session")
def tiny():
    return load_hardware("tiny")


@pytest.fixture(scope="session")
def ascend():
    return load_hardware("ascend910")
