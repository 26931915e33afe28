"""Master mode of sluice.Client: argument checks and the C library's errors
(the protocol itself is tested in tests/unit/trainer_master_test.c)."""

import socket

import pytest

import sluice


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_master_needs_a_job_and_excludes_address():
    with pytest.raises(ValueError, match="needs job="):
        sluice.Client(master="127.0.0.1:1")
    with pytest.raises(ValueError, match="not both"):
        sluice.Client("127.0.0.1:1", master="127.0.0.1:1", job="j")
    with pytest.raises(ValueError, match="neither"):
        sluice.Client()


def test_unreachable_master_is_a_sluice_error():
    addr = "127.0.0.1:%d" % _free_port()
    with pytest.raises(sluice.SluiceError) as e:
        sluice.Client(master=addr, job="j", connect_timeout_ms=1000)
    assert e.value.name == "SL_ERR_IO"
    assert "master " + addr in str(e.value)


def test_stats_have_master_fields():
    s = sluice.client._native.sl_trainer_stats_t()
    assert {"workers", "committed", "dropped"} <= {n for n, _ in s._fields_}
