"""Ranks of the multi-process tests, forked from a server that has imported Paddle and paddle_r1 once.

``paddle.distributed.spawn`` starts each rank as a new interpreter (the ``spawn`` start method), which imports
Paddle, PaddleFormers, transformers and the trainer again: about 4 s of CPU a rank, more than most of these tests
train. ``spawn_ranks`` asks it for its ``forkserver`` start method instead, with those modules preloaded in the
server (``multiprocessing.set_forkserver_preload``): the server imports them once per test process and every rank
is a fork of it, as fresh as a new interpreter but for the imports. The one difference a test could see, the
environment (a forked rank has the server's, taken when the first ranks were started), is undone: each rank runs
under the caller's environment at the call, with the variables Paddle set for that rank on top (and the proxies
its wrapper removes, removed).

Ranks launched as the users launch them (``paddle-r1 train`` under ``paddle.distributed.launch``) are the other
tests' business: those start real programs.
"""
import multiprocessing
import os

import paddle.distributed as dist

PRELOADED = ["paddle", "paddle.distributed", "paddle_r1.trainer.grpo", "paddle_r1.trainer.sft",
             "paddle_r1.evaluation.heldout", "forked_ranks", "dp_worker"]

# in a rank: the environment it inherited (the server's when forked, the caller's when spawned), before Paddle's
# wrapper set the rank's own variables
_INHERITED_ENVIRONMENT = dict(os.environ)


def spawn_ranks(func, args=(), nprocs: int = 2, **options):
    """``paddle.distributed.spawn(func, args, nprocs, backend="gloo")`` with the ranks forked from the preloaded
    server; raises as it does when a rank fails."""
    multiprocessing.set_forkserver_preload(PRELOADED)
    return dist.spawn(_under_environment, args=(dict(os.environ), func, tuple(args)), nprocs=nprocs,
                      backend="gloo", start_method="forkserver", **options)


def _under_environment(environment: dict, func, args: tuple):
    """What Paddle's wrapper did to the inherited environment (the rank's variables set, the proxies removed), done
    to the caller's instead."""
    from paddle.distributed.spawn import _remove_risky_env

    rank_variables = {key: value for key, value in os.environ.items() if _INHERITED_ENVIRONMENT.get(key) != value}
    os.environ.clear()
    os.environ.update(environment)
    os.environ.update(rank_variables)
    _remove_risky_env()
    return func(*args)
