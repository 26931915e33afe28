"""Make the package under python/ importable however pytest is started;
fixtures the tests share."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def sluice_binary():
    """The sluice program (SLUICE_BINARY), with libsluice_trainer.so loadable
    (SLUICE_TRAINER_LIB); the test is skipped without them."""
    from sluice import _native

    binary = os.environ.get("SLUICE_BINARY")
    if not binary or not os.path.exists(binary):
        pytest.skip("needs SLUICE_BINARY")
    try:
        _native.load()
    except OSError:
        pytest.skip("needs libsluice_trainer.so (SLUICE_TRAINER_LIB)")
    return binary
