"""Launch target for ``python -m paddle.distributed.launch``: the ``paddle-r1`` command as a script file."""
import sys

from paddle_r1.cli import main

if __name__ == "__main__":
    sys.exit(main())
