"""A job of many ranks dies whole, fast and loud.

Three ways a multi-rank run used to go wrong, and what this module does about each:

- **The launcher dies** (``kill -9`` of ``paddle.distributed.launch``): its ranks lived on as orphans, trained and
  wrote checkpoints. Every rank asks the kernel for SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``), so
  the ranks end with the process that started them (Linux; elsewhere nothing changes).
- **A rank is late** at a collective (a reward waiting on a slow judge): gloo gave up after its fixed 30 s with a
  ``TIMEOUT`` naming neither the rank nor what it was doing. Before each collective that follows rank-local work,
  every rank now checks in at the job's TCP store (the one paddle's process group was built on) and waits there,
  up to ``collective_timeout`` seconds, until all ranks have checked in; only then does it enter the collective,
  which is then immediate. Past the deadline it raises ``RankFailure`` naming each late rank and the phase it is
  in (``phase()``: rollout, rewards, saving, ...), published to the store as it changes.
- **A rank dies** on another node: the others waited at their next collective until a timeout. Each rank's
  heartbeat thread adds to its counter in the store every ``HEARTBEAT_SECONDS``; a rank waiting for a late rank
  whose heartbeat has stopped for ``dead_after`` seconds (config key ``heartbeat_timeout``, 60 s) ends with
  ``RankFailure`` at once ("rank 1 stopped ...").
  When rank 0 dies the store goes with it, and every other rank's next call to it fails: also ``RankFailure``. A
  collective already under way when a rank died fails in gloo or NCCL; ``explain`` turns that error into a
  ``RankFailure`` naming the rank whose heartbeat stopped.

On one node ``paddle.distributed.launch`` ends the remaining ranks itself when one of them exits with an error.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import sys
import threading
import time
from typing import Optional

HEARTBEAT_SECONDS = 2.0
_PR_SET_PDEATHSIG = 1
_PREFIX = "paddle_r1/"


class RankFailure(RuntimeError):
    """Another rank of the job is late past ``collective_timeout`` or has stopped: this rank ends too."""


def die_with_parent() -> None:
    """SIGKILL this process when the process that started it (the launcher) dies; if it already has, now."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGKILL)


def store_endpoint() -> tuple[str, int]:
    """The job's TCP store, found as ``paddle.distributed.init_parallel_env`` finds it."""
    endpoint = None
    if os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
        endpoint = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    endpoint = endpoint or os.environ.get("PADDLE_MASTER") or os.environ["PADDLE_TRAINER_ENDPOINTS"].split(",")[0]
    host, port = endpoint.rsplit(":", 1)
    return host, int(port)


def _client(host: str, port: int):
    """A client of the job's store whose requests go out at once (``no_delay``)."""
    from paddle.base.core import TCPStore

    before = _socket_fds()
    client = TCPStore(host, port, False, 0, 60)
    no_delay(_socket_fds() - before, port)
    return client


def _socket_fds() -> set[int]:
    """This process's open socket descriptors (Linux; elsewhere none are found)."""
    found = set()
    for fd in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else ():
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                found.add(int(fd))
        except OSError:  # closed since the listing
            pass
    return found


def no_delay(fds, port: int) -> None:
    """TCP_NODELAY on those of ``fds`` connected to ``port``. Paddle's TCPStore client leaves Nagle's algorithm on
    and writes a request in pieces: each piece after the first waits for the server's delayed ACK, 40 ms an ``add``
    and 88 ms a ``get`` (its server side has TCP_NODELAY). A check-in polls one ``add`` per rank, so a step of ~17
    check-ins on 8 ranks spent seconds waiting on ACKs; with the option an ``add`` takes ~0.1 ms
    (benchmarks/store_latency.py)."""
    for fd in fds:
        try:
            with socket.socket(fileno=os.dup(fd)) as sock:
                if sock.type == socket.SOCK_STREAM and sock.getpeername()[1] == port:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:  # closed since the listing, not a TCP socket, or not connected
            pass


class RankWatch:
    """This rank's check-ins, phase and heartbeat at the job's store (see the module's docstring)."""

    def __init__(self, rank: int, world_size: int, collective_timeout: float, dead_after: float = 60.0,
                 endpoint: Optional[tuple[str, int]] = None):
        self.rank, self.world_size = rank, world_size
        self.collective_timeout, self.dead_after = collective_timeout, dead_after
        self.endpoint = endpoint or store_endpoint()
        self._store = _client(*self.endpoint)  # the main thread's; the heartbeat thread has its own
        self._arrivals = 0
        self.phase("starting")
        self._beats = _client(*self.endpoint)
        self._beat()
        self._stopping = threading.Event()
        self._heartbeats = threading.Thread(target=self._heartbeat, name="paddle_r1-heartbeat", daemon=True)
        self._heartbeats.start()
        # stopped before the interpreter exits: a thread still inside the store's C++ client while the process
        # tears down its C++ objects ends the process with SIGABRT ("terminate called without an active exception")
        atexit.register(self.stop)

    # ---- what this rank tells the others ---------------------------------------------------------
    def phase(self, name: str) -> None:
        """What this rank is doing now, for the message another rank prints when this one is late."""
        self._call(self._store.set, f"{_PREFIX}phase/{self.rank}", f"{name}\t{time.time():.3f}")

    def _beat(self) -> None:
        self._beats.add(f"{_PREFIX}beat/{self.rank}", 1)

    def _heartbeat(self) -> None:
        while not self._stopping.wait(HEARTBEAT_SECONDS):
            try:
                self._beat()
            except Exception:  # the store is gone (rank 0 ended): the main thread finds out at its next call
                return

    def stop(self) -> None:
        """Ends the heartbeat thread (at exit; the other ranks then see this rank's beats stop)."""
        self._stopping.set()
        self._heartbeats.join()

    # ---- waiting for the others --------------------------------------------------------------------
    def arrive(self, where: str) -> None:
        """Check in before the collective ``where`` and wait until every rank has: ``RankFailure`` when one is
        later than ``collective_timeout`` or has stopped beating."""
        self._arrivals += 1
        self._call(self._store.add, f"{_PREFIX}arrived/{self.rank}", 1)
        start = time.monotonic()
        pause = 0.001
        last_beats: dict[int, tuple[int, float]] = {}
        while True:
            late = [r for r in range(self.world_size)
                    if self._call(self._store.add, f"{_PREFIX}arrived/{r}", 0) < self._arrivals]
            if not late:
                return
            now = time.monotonic()
            for r in late:
                beats = self._beats_of(r)
                if r not in last_beats or beats != last_beats[r][0]:
                    last_beats[r] = (beats, now)
                elif now - last_beats[r][1] > self.dead_after:
                    raise RankFailure(f"rank {self.rank}, waiting at {where}: rank {r} ({self._describe(r)}) "
                                      f"stopped (no heartbeat for {now - last_beats[r][1]:.0f} s, past "
                                      f"heartbeat_timeout = {self.dead_after:g} s); ending this rank")
            if now - start > self.collective_timeout:
                waited = ", ".join(f"rank {r} ({self._describe(r)})" for r in late)
                raise RankFailure(f"rank {self.rank} waited {now - start:.0f} s at {where} for {waited}: past "
                                  f"collective_timeout = {self.collective_timeout:g} s (config key "
                                  "collective_timeout); ending this rank")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def explain(self, error: Exception) -> Exception:
        """A collective that failed (gloo's ``TIMEOUT`` or a closed connection, possibly as the cause of the error
        the backward raised): when another rank's heartbeat has stopped, a ``RankFailure`` naming it and quoting the
        first line of the innermost error; else ``error`` as it is."""
        if isinstance(error, RankFailure):
            return error
        try:
            before = [self._beats_of(r) for r in range(self.world_size)]
            time.sleep(3 * HEARTBEAT_SECONDS)
            after = [self._beats_of(r) for r in range(self.world_size)]
        except RankFailure as gone:  # the store went with rank 0
            return gone
        stopped = [r for r in range(self.world_size) if r != self.rank and after[r] == before[r]]
        if not stopped:
            return error
        names = ", ".join(f"rank {r} ({self._describe(r)})" for r in stopped)
        innermost = error
        while innermost.__cause__ is not None or innermost.__context__ is not None:
            innermost = innermost.__cause__ or innermost.__context__
        text = str(innermost).strip()
        first_line = text.splitlines()[0] if text else type(innermost).__name__
        return RankFailure(f"rank {self.rank}: a collective failed because {names} stopped (no heartbeat for "
                           f"{3 * HEARTBEAT_SECONDS:.0f} s); ending this rank. The collective's error: {first_line}")

    def _beats_of(self, rank: int) -> int:
        """How many heartbeats ``rank`` has sent (read without waiting: ``add`` of 0)."""
        return self._call(self._store.add, f"{_PREFIX}beat/{rank}", 0)

    def _describe(self, rank: int) -> str:
        """``in phase 'rewards' for 41 s``, from what ``rank`` last published."""
        try:
            name, since = self._store.get(f"{_PREFIX}phase/{rank}").decode().split("\t")
        except Exception:
            return "its phase is unknown"
        return f"in phase {name!r} for {time.time() - float(since):.0f} s"

    def _call(self, method, *args):
        try:
            return method(*args)
        except Exception as e:
            host, port = self.endpoint
            raise RankFailure(f"rank {self.rank}: the job's store at {host}:{port} (held by rank 0) does not answer "
                              f"({type(e).__name__}: {e}): rank 0 has stopped; ending this rank") from None
