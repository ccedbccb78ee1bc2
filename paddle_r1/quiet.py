"""Keep the console for paddle_r1's own lines: paddleformers and paddle's checkpoint loader log every
file they touch at INFO, and importing paddleformers prints two notices that are false for a Paddle user.

Called by the commands (``paddle_r1.cli.main``, the eval scripts), never on ``import paddle_r1``: a library
import leaves the process's logging as it was.

paddle_r1's own lines follow one rule:

- A command speaks to its user with ``print``: on stdout what it was run for (results, tables, paths, the
  trainer's metric lines, a summary of the data it read) and one line for each choice it made for the user or
  event of the run (precision, rollout engine, resume position, a peer's config key and what it became, a skipped
  update), in the training loop from rank 0 only; the progress bar is tqdm's, on stderr. On stderr otherwise only
  what stops or endangers the command (``paddle-r1 <command>: error: ...``, the open-to-the-network banner of
  ``serve``, a stop that leaves a step unsaved). The commands' code is ``cli``, ``demo``, ``trainer/``,
  ``evaluation/``, ``view/``, ``config/`` (help, reading) and ``serve.server``.
- The parts they call (``rewards/``, ``data/``, ``models/``, ``generation/``, ``parallel/``, ``checkpoints/``,
  ``telemetry/``, ``memory``, ``serve.engine``) never print. What the user should read from them comes back to
  the command: a value it prints (a data report's ``summary()``, the memory table) or through an ``echo`` callable
  the command hands in (``check_fits``' host warning, ``checkpoints.folders``' verification lines, the metric
  lines of ``telemetry.metrics``; ``print`` when the command hands none).
- What a part notices on its own, and what is noticed about one item, on whichever rank meets it and possibly
  many times (a sample skipped, a reward that cannot score a problem or returns NaN, a judge without a verdict or
  that took the endpoint's only model, a request that failed, gradient buckets that must wait for the backward),
  goes to its module's ``logging.getLogger(__name__)``: ``warning`` for what the user should look at (on stderr
  even when nothing configured logging), ``info`` for routine lines (request lines), ``exception`` for a failure
  caught to keep going. paddle_r1 installs no logging handler. (``rewards/math_worker`` is a program of its own:
  its stdout is its replies.)"""
import logging

# (logger, message start). The first two are logged while paddleformers imports transformers with torch hidden
# (transformers' own __init__ runs twice: once by paddleformers, once by its processing_utils), then by paddleformers
# itself. Both speak of PyTorch, which a Paddle user does not have and does not need: paddleformers' models are
# Paddle's. The next two are paddleformers' PaddleOCR-VL: importing it asks for a package that would only swap its
# vision rotary for a Triton kernel (the plain Paddle one runs), and building it reports its head counts. The last is
# Paddle's checkpoint loader finding PaddleOCR-VL's unused packing table, and nothing else, in a checkpoint
# (paddle_r1.models.paddleocr_vl leaves it unread on purpose); any other unexpected key is still reported. The very
# last is rouge-score (the free-form rule of video_r1_accuracy) saying, through absl, that it tokenises as it always
# does.
IMPORT_NOTICES = [
    ("transformers", "PyTorch was not found. Models won't be available"),
    ("PaddleFormers", "Due to potential compatibility issues between PaddlePaddle and PyTorch in PaddleFormers"),
    ("PaddleFormers", "Triton is installed, but not yet compatible with Paddle"),
    ("PaddleFormers", "use GQA - num_heads"),
    ("paddle.distributed.fleet.utils.log_util",
     "Unexpected keys:{'visual.vision_model.embeddings.packing_position_embedding.weight'}, these keys"),
    ("absl", "Using default tokenizer."),
]


class DropMessage(logging.Filter):
    """Drops the records of one logger whose message starts with ``prefix``; every other record passes."""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


def drop_import_notices() -> None:
    """Filters ``IMPORT_NOTICES`` out of their loggers; to be called before paddleformers is imported (the
    loggers are created here if the libraries have not created them yet, and keep the filter). Idempotent."""
    for name, prefix in IMPORT_NOTICES:
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropMessage) and f.prefix == prefix for f in logger.filters):
            logger.addFilter(DropMessage(prefix))


# Warnings the libraries raise on every run that say nothing about the user's: paddle looking for a compiler cache
# it never uses here, setuptools' notice when paddle imports distutils, and paddle's advice to paddleformers'
# processor (``return_tensors="pd"`` copies its own tensors with paddle.to_tensor), and fleet's note, under sharding,
# that a rank is not in the communication groups of the other topology axes it builds (pipeline, model: one rank
# each here). Nothing else is filtered.
LIBRARY_WARNINGS = ("No ccache found", "Setuptools is replacing distutils", "To copy construct from a tensor",
                    r"Current global rank \d+ is not in group")


# The loggers that report every file paddleformers and Paddle's checkpoint loader touch, at INFO
CHATTY_LOGGERS = ("PaddleFormers", "paddle.distributed.fleet.utils.log_util")


class BelowLevel(logging.Filter):
    """Drops a logger's records below ``level``. A filter, not the logger's level: paddleformers sets its logger's
    level to DEBUG when it is imported, and a filter added before that import stays, so the libraries need not be
    imported to quiet them (a command that stops on a config typo never imports Paddle)."""

    def __init__(self, level: str):
        super().__init__()
        self.level = logging.getLevelName(level)

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self.level


def quiet_libraries(level: str = "WARNING") -> None:
    import warnings

    drop_import_notices()
    for message in LIBRARY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)
    for name in CHATTY_LOGGERS:
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, BelowLevel)]:
            logger.removeFilter(old)
        logger.addFilter(BelowLevel(level))
