"""One thread owns the model and decodes the requests that arrive together as one batch.

Handlers put requests on a queue and wait. The engine takes the first waiting request, gathers for a short window
the others with the same sampling settings and ``n`` (up to ``max_batch``), and runs them through the rollout's
KV-cached decode (``generation.rollout.sample_completions``) in one batch, as training generates a step's prompts.
Requests with other settings wait for the next batch. Paddle is driven from this one thread only.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Optional

import numpy as np
import paddle

from ..generation.encoding import encode_prompts
from ..generation.generator import Generator
from ..generation.rollout import sample_completions
from .chat import ChatRequest

logger = logging.getLogger(__name__)


@dataclass
class Choice:
    text: str
    finish_reason: str  # "stop" (end of turn or a stop string) or "length"
    token_ids: list  # the tokens generated, the end token included; past a stop string too (the batch decodes on)

    @property
    def completion_tokens(self) -> int:
        return len(self.token_ids)


@dataclass
class Answer:
    choices: list
    prompt_token_ids: list  # the prompt as the model read it: chat template applied, each image's tokens expanded

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)


def cut_at_stop(text: str, stop: list) -> tuple[str, bool]:
    """``text`` up to the earliest stop string, and whether one was found (OpenAI leaves the stop string out)."""
    cuts = [i for i in (text.find(s) for s in stop) if i >= 0]
    return (text[:min(cuts)], True) if cuts else (text, False)


def kept_tokens(ids, mask) -> list:
    """Each row's ids where its mask is 1: a prompt without its left padding, a completion without the padding after
    its end token."""
    return [[int(t) for t, keep in zip(row, row_mask) if keep] for row, row_mask in zip(ids.tolist(), mask.tolist())]


def request_uniforms(requests: list[ChatRequest]) -> Optional[paddle.Tensor]:
    """The random numbers each completion row draws its tokens with ([rows, max_new_tokens], rows request by request,
    ``n`` each: ``rollout.sample_completions``' ``uniforms``), where a request of the batch gives a ``seed``: its rows'
    from ``numpy.random.default_rng(seed)``, the others' fresh. A row's tokens depend only on its own numbers, so a
    seeded request's answer is the same whatever it is batched with. None when no request gives a seed."""
    if all(request.seed is None for request in requests):
        return None
    first = requests[0]
    shape = (first.n, first.sampling.max_new_tokens)
    rows = [np.random.default_rng(request.seed).random(shape, dtype=np.float32) for request in requests]
    return paddle.to_tensor(np.concatenate(rows))


class Engine:
    def __init__(self, generator: Generator, max_batch: int = 8, window: float = 0.02):
        self.generator, self.max_batch, self.window = generator, max_batch, window
        self.queue: "queue.Queue[tuple[ChatRequest, Future]]" = queue.Queue()
        self.waiting: list = []  # taken off the queue but not batchable with the batch being gathered
        self.batches = 0  # decodes run so far (tests read it to see requests share one)
        self._thread = threading.Thread(target=self._loop, name="paddle_r1-serve-engine", daemon=True)
        self._thread.start()

    def submit(self, request: ChatRequest) -> Future:
        future: Future = Future()
        self.queue.put((request, future))
        return future

    def _gather(self) -> list:
        """The next batch: the oldest waiting request and those with its settings that arrive within ``window``."""
        first = self.waiting.pop(0) if self.waiting else self.queue.get()
        batch, deadline = [first], time.monotonic() + self.window
        for job in list(self.waiting):
            if len(batch) < self.max_batch and job[0].batch_key == first[0].batch_key:
                self.waiting.remove(job)
                batch.append(job)
        while len(batch) < self.max_batch:
            try:
                job = self.queue.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                break
            (batch if job[0].batch_key == first[0].batch_key else self.waiting).append(job)
        return batch

    def _loop(self) -> None:
        while True:
            batch = self._gather()
            try:
                answers = self.answer([request for request, _ in batch])
            except Exception as e:  # noqa: BLE001 -- reported to each waiting client as a 500, the server lives on
                logger.exception("generation failed")
                for _, future in batch:
                    future.set_exception(e)
                continue
            for (_, future), answer in zip(batch, answers):
                future.set_result(answer)

    def answer(self, requests: list[ChatRequest]) -> list[Answer]:
        """Requests sharing one ``batch_key``, decoded in one batch."""
        generator, first = self.generator, requests[0]
        prompt, _ = encode_prompts([r.prompt for r in requests], [r.images for r in requests], generator.processor,
                                   [r.videos for r in requests])
        rollout = sample_completions(generator.model, prompt, first.n, first.sampling, generator.eos_token_ids,
                                     generator.tokenizer.pad_token_id, uniforms=request_uniforms(requests))
        self.batches += 1
        decoded = generator.decode(rollout)
        completions = kept_tokens(rollout.completion_ids, rollout.completion_mask)
        truncated = rollout.truncated.tolist()
        prompts = kept_tokens(prompt.input_ids, prompt.attention_mask)
        answers = []
        for i, request in enumerate(requests):
            choices = []
            for row in range(i * first.n, (i + 1) * first.n):
                text, stopped = cut_at_stop(decoded[row], request.stop)
                reason = "length" if truncated[row] and not stopped else "stop"
                choices.append(Choice(text=text, finish_reason=reason, token_ids=completions[row]))
            answers.append(Answer(choices=choices, prompt_token_ids=prompts[i]))
        return answers
