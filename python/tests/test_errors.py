"""Errors from the C library reach Python as SluiceError with the C message.
Needs libsluice_trainer.so, no worker."""

import socket

import pytest

import sluice
from procs import needs_lib
from sluice import _native

pytestmark = needs_lib


def _closed_port():
    # A port nobody listens on: bind, read the port, close.
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_refused_address():
    addr = "127.0.0.1:%d" % _closed_port()
    with pytest.raises(sluice.SluiceError) as ei:
        sluice.Client(addr, connect_timeout_ms=500, reconnect_ms=-1)
    e = ei.value
    assert e.code == -7 and e.name == "SL_ERR_IO"
    # Our prefix, then the C library's own message naming the address.
    c_msg = str(e).split("connect to %s: " % addr, 1)[1]
    assert addr in c_msg and "refused" in c_msg.lower()


def test_malformed_address():
    with pytest.raises(sluice.SluiceError) as ei:
        sluice.Client("no-port-here", connect_timeout_ms=500, reconnect_ms=-1)
    assert ei.value.code == -2
    assert "no-port-here" in str(ei.value).split("connect to no-port-here: ", 1)[1]


def test_opts_default_comes_from_the_library():
    o = _native.load().sl_trainer_opts_default()
    assert o.address is None and o.world_size == 1
    assert o.limits.max_frame_bytes == 0 or o.limits.max_frame_bytes >= 1 << 20


def test_master_connect_error_names_the_master():
    addr = "127.0.0.1:%d" % _closed_port()
    with pytest.raises(sluice.SluiceError) as ei:
        sluice.Client(master=addr, job="j1", connect_timeout_ms=500, reconnect_ms=-1)
    e = ei.value
    assert e.code == -7 and e.name == "SL_ERR_IO"
    # Our prefix names the master and the job, the C message the address.
    prefix = "SL_ERR_IO: connect to master %s (job j1): " % addr
    assert str(e).startswith(prefix), str(e)
    c_msg = str(e)[len(prefix):]
    assert addr in c_msg and "refused" in c_msg.lower()


def test_unreadable_cluster_secret_file(tmp_path):
    missing = str(tmp_path / "no-such-secret")
    with pytest.raises(sluice.SluiceError) as ei:
        sluice.Client("127.0.0.1:1", cluster_secret_file=missing, reconnect_ms=-1)
    assert ei.value.code == -7
    assert missing in str(ei.value)
    short = tmp_path / "short-secret"
    short.write_text("abc\n")
    with pytest.raises(sluice.SluiceError) as ei:
        sluice.Client("127.0.0.1:1", cluster_secret_file=str(short), reconnect_ms=-1)
    assert ei.value.code == -2
    assert "at least 16" in str(ei.value) and "abc" not in str(ei.value).split(str(short))[1]
