"""The repetition penalty of the rollout's sampling (config key ``repetition_penalty``, TRL's, transformers' and vLLM's
key of that name), over the tokens each row has seen:

    z'_v = z_v / p   if z_v > 0
    z'_v = z_v * p   otherwise          for each token v the row has seen; z'_v = z_v for every other token

with p the penalty (> 1 discourages repeating, < 1 encourages it), applied to the float32 logits before temperature,
top-k, top-p and min-p, and in greedy decoding too (transformers' ``RepetitionPenaltyLogitsProcessor``, vLLM's
``apply_penalties``).

What a row has seen: its prompt's tokens (image and video placeholders included, as both read ``input_ids``), the
tokens it sampled, and in a multi-turn rollout its given first turn and its tools' messages. Not the prompt's left
padding: vLLM's prompts have none, while transformers' batched ``generate`` counts the pad token too, which would
make a row's tokens depend on the prompts batched with it (here they must not: the same completions on 1 or N
ranks). The set is a [rows, vocab] float32 tensor counting each token's occurrences (> 0: seen; a scatter-add,
which every Paddle device has), kept only when the penalty is not 1.
"""
from __future__ import annotations

from typing import Optional

import paddle

from ..models.forward import repeat_rows


class SeenTokens:
    """Per row, which token ids it has seen (see the module docstring)."""

    def __init__(self, seen: paddle.Tensor):
        self.seen = seen  # [rows, vocab] float32: how many times each row has seen each token

    @classmethod
    def of(cls, ids: paddle.Tensor, mask: paddle.Tensor, vocab: int) -> "SeenTokens":
        """The tokens of ``ids`` [rows, length] where ``mask`` [rows, length] is 1 (the padding left out)."""
        return cls(paddle.zeros([ids.shape[0], vocab], dtype="float32")).add(ids, mask)

    def add(self, ids: paddle.Tensor, mask: paddle.Tensor) -> "SeenTokens":
        """The tokens of ``ids`` [rows, length] where ``mask`` [rows, length] is 1 (a bool or integer mask) seen too."""
        self.seen = paddle.put_along_axis(self.seen, ids.astype("int64"), mask.astype("float32"), axis=1,
                                          reduce="add")
        return self

    def select(self, rows: paddle.Tensor) -> "SeenTokens":
        """The rows ``rows`` (int64 indices) of this set, in that order."""
        return SeenTokens(paddle.index_select(self.seen, rows))

    def penalize(self, logits: paddle.Tensor, penalty: float) -> paddle.Tensor:
        """``logits`` [rows, vocab] float32 with the penalty on the seen tokens (the formula above)."""
        penalized = paddle.where(logits > 0, logits / penalty, logits * penalty)
        return paddle.where(self.seen > 0, penalized, logits)


def seen_in_prompts(penalty: float, prompt_ids: paddle.Tensor, repeats: int, mask: paddle.Tensor, vocab: int
                    ) -> Optional[SeenTokens]:
    """The tokens of ``prompt_ids`` [prompts, length], each prompt's row ``repeats`` times in a row (its completions;
    ``mask`` [prompts x repeats, length]), as seen, where a ``penalty`` other than 1 reads them; else None, with
    nothing made."""
    return None if penalty == 1.0 else SeenTokens.of(repeat_rows(prompt_ids, repeats), mask, vocab)
