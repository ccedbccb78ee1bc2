"""The task families of rewards, one module each; importing this package imports them all, which registers their
rewards (``paddle_r1.rewards.registry.load_builtin_rewards``)."""
from . import (answers, boxes, caption, detection, format, gui, judge, multibox, ocr, products,  # noqa: F401
               temporal, tools, video_r1)
