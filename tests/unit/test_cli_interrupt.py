"""Ctrl-C ends `gangsched top` (cli.until_interrupted) at once, whatever its work is doing
(issue 23.7): blocked writing into a full stdout pipe, waiting for an answer that does not
come, started with SIGINT ignored. Each case is a child process sent SIGINT; the waits are
on conditions (the pipe full, the child ready), and the timeouts generous, for a busy machine.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gangsched import cli
from gangsched_testing import pipes

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="full pipes are made with Linux's fcntl")

# Seconds a child may take to exit after SIGINT: at once, but a loaded CI machine may not
# schedule it for a while.
EXIT_TIMEOUT = 60.0
LINE = 1000  # bytes per line written into the pipe

CHILD = """
import signal, socket, sys, time
from gangsched.cli import until_interrupted
from gangsched.cluster.read import connect

mode, port, kubeconfig = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if mode == "ignored":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a script's background job inherits it

def work():
    if mode == "pipe":
        while True:
            sys.stdout.write("x" * {line} + "\\n")
            sys.stdout.flush()
    connect(kubeconfig=kubeconfig)  # writes the kubeconfig's certificates into files
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(b"GET /api HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
        print("ready", file=sys.stderr, flush=True)
        conn.recv(1)  # a request in flight: the server never answers

until_interrupted(work, status=int(sys.argv[4]))
""".replace("{line}", str(LINE - 1))


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def kubeconfig(path: Path, port: int) -> Path:
    def data(what: str) -> str:  # the client writes them into files, and reads them only to connect
        return base64.b64encode(f"not a {what}".encode()).decode()

    cluster = {"server": f"https://127.0.0.1:{port}", "certificate-authority-data": data("CA")}
    user = {"client-certificate-data": data("certificate"), "client-key-data": data("key")}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path.write_text(json.dumps(config))
    return path


def child(
    mode: str, port: int, tmp_path: Path, status: int = 0, stdout: int = subprocess.PIPE
) -> subprocess.Popen[bytes]:
    temp = tmp_path / "tmp"
    temp.mkdir()
    # As a shell runs it: stdout buffered (no PYTHONUNBUFFERED), SIGINT not ignored.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | {"TMPDIR": str(temp)}
    args = [mode, str(port), str(kubeconfig(tmp_path / "config", port)), str(status)]
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, *args], stdout=stdout, stderr=subprocess.PIPE, env=env
    )


def interrupt(proc: subprocess.Popen[bytes]) -> int:
    """SIGINT, then the exit status, without reading the child's stdout."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout=EXIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"still running {EXIT_TIMEOUT:.0f} s after SIGINT") from None


def test_ctrl_c_stops_a_write_blocked_on_a_full_pipe(tmp_path: Path, silent_server: int) -> None:
    """Interpreter shutdown would flush the buffered line into the pipe nobody reads: no exit."""
    pipe = pipes.small_pipe()
    try:
        proc = child("pipe", silent_server, tmp_path, stdout=pipe.writer)
    finally:
        os.close(pipe.writer)
    with pipe.reader:
        pipes.wait_until_full(proc.pid, pipe, line=LINE)
        assert interrupt(proc) == 0
    assert proc.stderr is not None
    assert proc.stderr.read() == b""


@pytest.mark.parametrize(("mode", "status"), [("request", 0), ("request", 130), ("ignored", 0)])
def test_ctrl_c_stops_a_request_in_flight_and_removes_the_credential_files(
    tmp_path: Path, silent_server: int, mode: str, status: int
) -> None:
    """Also with SIGINT ignored by whoever started it ("ignored"), as kubectl's watches stop."""
    proc = child(mode, silent_server, tmp_path, status)
    assert proc.stderr is not None
    assert proc.stderr.readline() == b"ready\n"
    assert len(list((tmp_path / "tmp").iterdir())) == 3  # CA, client certificate, client key
    assert interrupt(proc) == status
    assert list((tmp_path / "tmp").iterdir()) == []


def test_the_work_ends_as_it_would_without_it() -> None:
    """Its result, or its exception in the caller's thread; SIGINT's handler is put back."""
    before = signal.getsignal(signal.SIGINT)
    seen: list[str] = []
    cli.until_interrupted(lambda: seen.append("done"), status=0)
    assert seen == ["done"]

    def fail() -> None:
        sys.exit(2)

    with pytest.raises(SystemExit) as exc:
        cli.until_interrupted(fail, status=0)
    assert exc.value.code == 2
    assert signal.getsignal(signal.SIGINT) is before
