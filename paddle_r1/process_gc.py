"""Python's garbage collector in a process paddle_r1 runs as a program: the libraries' import-time objects are kept
out of every full collection.

Importing Paddle, PaddleFormers and transformers leaves about 190,000 objects that live as long as the process, and a
full collection walks every one of them (0.17 s on a 2-core AMD EPYC Zen 3). The imports themselves set off four full
collections, and Paddle's checkpoint loader (``paddle.distributed.flex_checkpoint``'s ``load_state_dict``) calls
``gc.collect()`` on every model load: 6 full collections, 0.77 s, in a 6.8-second ``paddle-r1 train`` of the tiny
model. A command holds the collector while it imports its libraries (``importing_libraries``), then moves everything
alive into the permanent generation (``gc.freeze``), which collections skip; what the run makes afterwards is
collected as before. At exit they are handed back (``gc.unfreeze``), so that the interpreter's last collection
finalizes them as it would have (left frozen, a spawned rank of a 2-rank test job aborted as it ended, once in six runs
on a busy machine); that collection walks them once more, so the process gains less than the 0.77 s: 6.48 s against
6.83 (``benchmarks/process_gc.py``). The test suite freezes its session's imports too (``tests/conftest.py``): one
process loading models hundreds of times is where it matters most.

Only in a process that is the program: ``paddle_r1.cli.main`` and the eval scripts' ``main`` called without argv (the
console script, ``python -m paddle_r1.cli``, the launch scripts' ranks, ``python eval/test_rec.py``) call
``running_as_program``. Frozen objects are never collected, so in a caller's process (a notebook's kernel, a test
calling ``main([...])``) whatever cyclic garbage it held at that moment would stay: there the collector is left as
it is.
"""
from __future__ import annotations

import atexit
import contextlib
import gc

_program = False


def running_as_program() -> None:
    """This process is paddle_r1's program: ``importing_libraries`` may hold and freeze the collector."""
    global _program
    _program = True


@contextlib.contextmanager
def importing_libraries():
    """No collection while the block imports; afterwards every object alive is frozen (in the program only)."""
    if not _program or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
        atexit.register(gc.unfreeze)  # before the interpreter's own teardown: handlers run last registered first
