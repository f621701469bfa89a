"""A child's stdout as a full pipe, for the tests that stop a command blocked writing into it.

Waited for by what the pipe holds, not by time: a busy machine (CI shares its machine) may take
any time to fill it. Linux only (F_SETPIPE_SZ, FIONREAD, /proc), as the tests that use it.
"""

from __future__ import annotations

import array
import fcntl
import os
import termios
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO

# The smallest pipe Linux makes (a page): a few lines fill it.
SMALL_PIPE = 4096


@dataclass(frozen=True, slots=True)
class Pipe:
    reader: BinaryIO  # the read end, for the test
    writer: int  # the write end's descriptor, for the child's stdout: close it once it has one
    capacity: int  # bytes it holds


def small_pipe(size: int = SMALL_PIPE) -> Pipe:
    """A new pipe of `size` bytes (the kernel rounds up to a page), made small before any
    child writes into it (Linux refuses to shrink a pipe below what it holds)."""
    read_fd, write_fd = os.pipe()
    capacity = fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, size)
    return Pipe(os.fdopen(read_fd, "rb"), write_fd, capacity)


def held(pipe: IO[Any]) -> int:
    """Bytes written into the pipe and not yet read."""
    count = array.array("i", [0])
    fcntl.ioctl(pipe.fileno(), termios.FIONREAD, count)
    return count[0]


def _writing_to_a_pipe(pid: int) -> bool | None:
    """Is a thread of `pid` asleep in a pipe write? None when the kernel does not say (wchan
    hidden, or no /proc)."""
    said = False
    for wchan in Path(f"/proc/{pid}/task").glob("*/wchan"):
        try:
            where = wchan.read_text().strip()
        except OSError:
            continue
        if "pipe" in where:  # pipe_write (anon_pipe_write in 6.x, pipe_wait in 4.x)
            return True
        said = said or where not in ("", "0")
    return False if said else None


def wait_until_full(pid: int, pipe: Pipe, *, line: int, timeout: float = 120.0) -> int:
    """Wait until `pid`, which writes lines of `line` bytes into `pipe` (not read meanwhile),
    is blocked on it: its next line does not fit (a blocking write waits until all of it is
    in; a line longer than the pipe first fills it) and, where the kernel says it, a thread
    of `pid` sleeps in a pipe write. The bytes held then."""
    deadline = time.monotonic() + timeout
    while True:
        now_held = held(pipe.reader)
        free = pipe.capacity - now_held
        full = free < line if line <= pipe.capacity else free == 0
        if full and _writing_to_a_pipe(pid) is not False:
            return now_held
        if time.monotonic() > deadline:
            raise AssertionError(
                f"after {timeout:.0f} s the pipe holds {now_held}/{pipe.capacity} bytes "
                f"(lines of {line}); its writer is not blocked on it"
            )
        time.sleep(0.05)
