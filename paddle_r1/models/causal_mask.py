"""Causal attention under ``attn_implementation: sdpa`` that holds after a KV cache, for every decoder paddle_r1 runs.

paddleformers 1.2.0 leaves the attention mask out under sdpa when no row is padded (always the case with one prompt
per device), and its ``sdpa_attention_forward`` then asks Paddle's ``scaled_dot_product_attention`` for
``is_causal=True``. Paddle's memory-efficient and math kernels align that causality top-left: query i sees keys
0..i. That is right when the queries are all the keys (a prompt's own forward) and wrong when they follow a KV cache
(1 < queries < keys: the completions after their prompt's keys in the log-prob pass, ``forward.RepeatedPrompt``; a
multi-turn episode's next segment): query i sits at key position keys - queries + i and must see every key up to it
(bottom-right), but saw only the first ``queries`` keys of the prompt. Flash attention refuses causality with
queries != keys (``check_flash_causal_non_square_seqlens`` in paddle/nn/functional/sdpa.py), so such calls always
ran one of the two top-left kernels, and the policy's, old policy's and reference's log-probs were all wrong alike.
paddleformers' ERNIE-4.5 attention (PaddleOCR-VL) also passes its ``is_causal`` with a mask, which Paddle then drops:
the padding and the rollout cache's free slots were attended.

``sdpa_causality`` hands sdpa what computes eager attention's numbers: the mask when there is one (it holds the
causality, bottom-right, and the padding) with ``is_causal`` off; without one, ``is_causal`` where queries and keys
are the same positions, so that flash attention stays reachable on a GPU; an explicit bottom-right mask, in the
query's dtype (Paddle adds a float mask to the scores as it is), where queries follow a cache.
"""
from __future__ import annotations

from typing import Optional

import paddle


def sdpa_causality(attention_mask: Optional[paddle.Tensor], queries: int, keys: int,
                   dtype) -> tuple[Optional[paddle.Tensor], bool]:
    """(mask, is_causal) for sdpa over ``queries`` queries that are the last of ``keys`` keys (see the module
    docstring). A single query after a cache sees every key: neither mask nor causality."""
    if attention_mask is None and 1 < queries < keys:
        attention_mask = paddle.triu(paddle.full([queries, keys], float("-inf"), dtype=dtype),
                                     diagonal=keys - queries + 1).reshape([1, 1, queries, keys])
    return attention_mask, attention_mask is None and queries > 1


class SdpaCausality:
    """Put before a paddleformers attention layer class (it takes ``hidden_states``, ``attention_mask`` and
    ``past_key_values`` by keyword; Qwen3-VL's text attention, ERNIE-4.5's): under sdpa the layer's forward gets
    ``sdpa_causality``'s mask, and its ``is_causal`` that call's flag. The flag is set per call because ERNIE's
    forward hands ``self.is_causal`` to sdpa as it is; Qwen3-VL's lets sdpa_attention_forward derive it, which
    reads the same value. Eager attention adds the mask paddleformers always builds for it and is left alone."""

    @classmethod
    def install(cls, attention) -> None:
        """Make ``attention`` (paddleformers' layer, its parameters and buffers untouched) an instance of ``cls``."""
        attention.__class__ = cls

    def forward(self, hidden_states, attention_mask=None, past_key_values=None, **kwargs):
        if self.config._attn_implementation != "eager":
            queries = hidden_states.shape[1]
            cached = past_key_values.get_seq_length(self.layer_idx) if past_key_values is not None else 0
            attention_mask, self.is_causal = sdpa_causality(attention_mask, queries, queries + cached,
                                                            hidden_states.dtype)
        return super().forward(hidden_states, attention_mask=attention_mask, past_key_values=past_key_values, **kwargs)
