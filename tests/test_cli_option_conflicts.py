"""Options that contradict themselves or each other (an empty --host, a system priced or named twice, a load too small
to plan for) are refused with one ``error:`` line naming the option, exit code 2; the HTTP API answers 422 naming the
parameter. Error messages of unknown names start with the option they came from."""

from __future__ import annotations

import socket

import pytest


class _LoopbackOnly(socket.socket):
    """A socket that refuses to listen on anything but loopback: a test of --host must not expose a port."""

    def bind(self, address):  # type: ignore[no-untyped-def]
        if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "::1", "localhost"):
            raise AssertionError(f"would listen on {address!r}")
        super().bind(address)


@pytest.mark.parametrize("host", ["", "  "])
@pytest.mark.parametrize("command", [["serve"], ["twin", "llama-3.1-8b", "--system", "h200"]])
def test_an_empty_host_is_refused_not_read_as_every_interface(run_cli, monkeypatch, command, host):
    """``bind(('', port))`` listens on every interface (0.0.0.0); the docs say only 0.0.0.0 exposes the server."""
    monkeypatch.setattr(socket, "socket", _LoopbackOnly)
    code, out, err = run_cli(*command, "--host", host, "--port", "0")
    assert code == 2
    assert err.startswith("error: --host: ") and "empty" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
