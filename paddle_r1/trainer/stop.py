"""A run stopped from outside ends after a finished step, with that step's checkpoint.

SIGTERM is how a scheduler, Kubernetes, AI Studio's time limit or ``paddle.distributed.launch`` (which then gives its
ranks 30 s before SIGKILL) end a job; by default it ended the process at once, and every step since the last save was
lost. While ``Trainer.train`` runs, the signals named by ``stop_signals`` only record that they came. The ranks sum
that record once per step, at the step boundary (``agreed``), so a signal to the launcher or to any one rank stops
every rank after the same step: the step in progress is finished (a step cannot be cut short safely: a rank leaving
in the middle of a collective holds the others until ``collective_timeout``), its checkpoint is written as any other
(every rank's files into ``checkpoint-N.tmp``, renamed in only once complete) and the process exits with code
128 + the signal's number (143 for SIGTERM), as a shell reports a process that signal ended.

``stop_grace_seconds`` after the signal, a process that has not finished (a step waiting on the judge, a slow save)
says that it saves nothing and which checkpoint is the newest, and exits with ``UNSAVED_EXIT`` before the scheduler's
SIGKILL would end it without a word. Since a checkpoint is renamed in only when every rank's files are in it, the
ranks leave one complete checkpoint or none, never a mix (an unfinished ``.tmp`` is removed at the next start).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Optional

from ..checkpoints import folders as ckpt
from ..parallel.distributed import gather_objects, sum_across_ranks

UNSAVED_EXIT = 1  # the grace period passed before the checkpoint was complete


class RunStopped(SystemExit):
    """Raised by ``Trainer.train`` once the stop's checkpoint is written: the process exits with its code (a
    ``SystemExit``, so that every ``finally`` runs and nothing catches it as an error)."""


class StopSignals:
    """Around the train loop (``start``, ``close``): the stop signals recorded instead of ending the process, and a
    watchdog that ends it ``grace_seconds`` after the first one. The watchdog learns of a signal through
    ``signal.set_wakeup_fd``, written by the C-level handler the moment the signal arrives, so the grace period counts
    from then even while the main thread is inside a long C call (a forward, a collective), where Python's handlers
    wait."""

    def __init__(self, names: list[str], grace_seconds: float, output_dir: str, is_main: bool):
        self.numbers = {signal.Signals[name].value for name in names}
        self.grace_seconds, self.output_dir, self.is_main = grace_seconds, output_dir, is_main
        self.received: Optional[int] = None  # the first stop signal's number
        self.received_at: Optional[float] = None  # time.monotonic() when the watchdog saw it
        self._previous: dict = {}
        self._done = threading.Event()

    def start(self) -> None:
        """The handlers and the watchdog, until ``close``."""
        if threading.current_thread() is not threading.main_thread() or not self.numbers:
            return  # handlers can be set in the main thread only (a notebook's worker thread keeps the defaults)
        read, write = os.pipe()
        os.set_blocking(write, False)
        self._pipe = (read, write)
        for number in self.numbers:
            self._previous[number] = signal.signal(number, self._record)
            # system calls the signal lands in are restarted, not failed with EINTR: Paddle's store client (the
            # collectives' check-ins) took an interrupted recv for a dead rank 0 and ended both ranks
            signal.siginterrupt(number, False)
        self._previous_wakeup = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        self._watchdog = threading.Thread(target=self._watch, name="paddle_r1-stop-watchdog", daemon=True)
        self._watchdog.start()

    def close(self) -> None:
        """The previous handlers back, the watchdog ended."""
        if not self._previous:
            return
        self._done.set()
        signal.set_wakeup_fd(self._previous_wakeup)
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        os.write(self._pipe[1], b"\0")  # wakes the watchdog if it waits for a signal
        self._watchdog.join()
        for fd in self._pipe:
            os.close(fd)

    def _record(self, number: int, frame) -> None:
        """The Python-level handler, in the main thread: the signal is read at the next step boundary."""
        if self.received is None:
            self.received = number

    def _watch(self) -> None:
        while self.received_at is None and not self._done.is_set():
            woken_by = os.read(self._pipe[0], 64)
            if any(b in self.numbers for b in woken_by) and not self._done.is_set():
                self.received_at = time.monotonic()
                self.received = self.received or next(b for b in woken_by if b in self.numbers)
        if self._done.wait(self.grace_seconds):
            return
        if self.is_main:
            newest = ckpt.list_checkpoints(self.output_dir)
            print(f"paddle-r1: {signal.Signals(self.received).name} came {self.grace_seconds:g} s ago "
                  f"(stop_grace_seconds) and the step in progress and its checkpoint are not done: exiting without "
                  f"them; {'the newest complete checkpoint is ' + newest[-1] if newest else 'no checkpoint was saved'}",
                  file=sys.stderr, flush=True)
        os._exit(UNSAVED_EXIT)  # the main thread may be inside a forward or waiting on the judge

    def agreed(self, world_size: int) -> Optional[int]:
        """At a step boundary, on every rank: the stop signal one of the ranks received (the lowest rank's), or
        None. One sum over ranks per step; the signal itself is gathered only when there is one."""
        if not sum_across_ranks(float(self.received is not None), world_size, "the check for a stop signal"):
            return None
        return next(n for n in gather_objects(self.received, world_size, "the stop signal") if n is not None)

    def seconds_since(self) -> float:
        """Seconds since this process received the stop signal (``received_at`` is set)."""
        return time.monotonic() - self.received_at
