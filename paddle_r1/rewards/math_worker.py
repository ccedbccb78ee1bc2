"""The math-verify worker: ``python -m paddle_r1.rewards.math_worker``, run by ``MathVerifier`` (rewards/families/
answers.py). It reads one JSON line ``[gold, pred, seconds]`` at a time from stdin and answers "equal", "different"
or "unparsed" on stdout; it imports only math_verify (and this package's inert ``__init__``s), so it starts fast, and
it ends when its parent does."""
import json
import logging
import os
import re
import signal
import sys
import threading
import time

logging.disable(logging.CRITICAL)  # a program, not a library: math_verify's import-time logging is not for the replies
from math_verify import parse, verify  # noqa: E402

EXPRESSION = re.compile(r"(?:[\d\s.+\-*/^()=<>]|(?<![A-Za-z])[A-Za-z](?![A-Za-z]))+")  # "1+x^2", "2x": no words


def orphan_watch(parent=os.getppid()):
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def read(text):
    """math-verify's parse, whitespace runs read as one space. A short answer in bare LaTeX ("\\sqrt{2}", "2\\pi")
    or a bare expression with a digit and a variable ("1+x^2") is tried inside $...$ first (the plain parse reads
    "2\\sqrt{3}" as 2 and "1+x^2" as 1), and a short one holding a digit is retried inside $...$ when the plain
    parse finds nothing. A long text in bare LaTeX is not read at all (parsing it wrapped can take very long and
    the plain parse reads a fragment of it: "\\frac{1}{2}+1" as 1/2); other long texts are parsed as they are."""
    text = " ".join(text.split())
    wrapped = "$" + text + "$"
    delimited = re.search(r"\$|\\\(|\\\[|\\boxed", text)
    if len(text) > 300:
        return [] if "\\" in text and not delimited else parse(text, parsing_timeout=None)
    expression = EXPRESSION.fullmatch(text) and re.search(r"\d", text) and re.search(r"[A-Za-z^]", text)
    wrap_first = not delimited and ("\\" in text or expression)
    retry = "$" not in text and re.search(r"\d", text)
    tries = [wrapped, text] if wrap_first else [text] + ([wrapped] if retry else [])
    for attempt in tries:
        found = parse(attempt, parsing_timeout=None)  # no signal.alarm: the parent enforces the deadline
        if found:
            return found
    return []


def main() -> None:
    threading.Thread(target=orphan_watch, daemon=True).start()
    replies, sys.stdout = sys.stdout, sys.stderr  # anything a library prints goes to stderr, not into the replies
    print("ready", file=replies, flush=True)
    for line in sys.stdin:
        gold, pred, seconds = json.loads(line)
        if hasattr(signal, "alarm"):  # backstop, for when the parent died before killing us: SIGALRM's default
            signal.alarm(int(seconds) + 2)  # action ends the process even while a C call holds the GIL
        try:
            g, p = read(gold), read(pred)
            reply = "unparsed" if not g or not p else ("equal" if verify(g, p, timeout_seconds=None) else "different")
        except Exception:
            reply = "unparsed"
        if hasattr(signal, "alarm"):
            signal.alarm(0)
        print(reply, file=replies, flush=True)


if __name__ == "__main__":
    main()
