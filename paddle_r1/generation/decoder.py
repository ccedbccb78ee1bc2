"""The rollout's decode step: one token per row through the text decoder, over a KV cache allocated once.

``make_decoder`` picks ``OneTokenDecoder`` (plain tensor operations over the decoder's weights, arranged once per
rollout) for the text decoders of every family paddle_r1 runs (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, PaddleOCR-VL's
ERNIE-4.5) as paddle_r1 loads them, and ``LayerDecoder`` (the model's own layers) for any other.

Calling the decoder layers token by token costs more than their arithmetic at rollout sizes (16 rows of one token):
each layer call is Python dispatch, hooks and a dozen small kernels. A profile of the speed anchor's rollout on CPU
put three avoidable costs on top of that (``benchmarks/rollout.py``). The measurements behind each choice below are
scripts in ``benchmarks/experiments/``; their figures are in ``benchmarks/README.md``, beside their commands.

- On CPU the products with the weights bound the step: each is a few rows by a whole weight, and MKL's plain
  ``sgemm`` re-lays the weight out for its kernel on every call. The weights (float32) are packed with MKL's packed
  API instead (``packed_products.py``: one extra copy of them while the rollout runs); elsewhere (a GPU, bfloat16)
  they are used as they are. Packing costs about what 10 tokens of plain products lose against packed ones
  (``mlp_products.py`` prints both), so a rollout packs only once it has decoded ``pack_after`` tokens
  (``SamplingParams.pack_after``, ``PACK_AFTER_STEPS`` by default): short answers (a served reply, an evaluation)
  never pay for it, and no rollout loses more than that much. A GRPO rollout, whose completions run long, packs before
  its first token (the trainer passes 0 unless ``max_completion_length`` is within ``PACK_AFTER_STEPS``).
- With ``rollout_bf16_products`` (CPU) the weights are packed by oneDNN in bfloat16 instead (``onednn.py``): the
  products run on the CPU's bf16 instructions, about twice MKL's float32 rate where it has them; the rest of the step
  stays float32.
- q @ K^T over the cache as a batched ``transpose_y`` product is slower than over keys stored transposed
  (``kv_cache.TransposedKVCache``; ``decode_products.py``).
- The rotary tables of every step are computed in one call before the loop, not one call per token.
- Many of the step's kernels were small elementwise ones (``decode_floor.py`` counts them); these are merged:
  each RMSNorm and the residual add before it are one ``fused_rms_norm`` (Paddle registers its kernel on CPU; on a
  CPU without AVX-512, where that kernel cannot run, they are separate kernels: ``fused_rms_norm_runs``), the
  query, key and value of a layer are rotated in one pass over its qkv product (the value with cos 1 and sin 0, the
  query's tables carrying the attention's scaling), the qkv bias is added by the product's kernel (``linear``), and
  the rotary rows and the mask are laid out once per step, not per layer. (Paddle's ``swiglu`` kernel was slower
  than ``silu(gate) * up``: ``decode_levers.py``.)

On a GPU its step reads nothing from the host: the slot it writes and the rotary row it takes are tensors on the
device, so the step's device work (``compute``, between the host's ``prepare`` and ``count``) is captured and
replayed as CUDA graphs as it is (``cuda_graphs.py``, ``rollout_cuda_graphs``). On the CPU the float32 cache is
written at the host's count of slots by MKL's copies (``kv_cache.py``), where no capture applies.

The arithmetic is the model's (``FastTextAttention``, ``FastRMSNorm``, paddleformers' MLP, ``LoRALinear``'s
adapters; Qwen3-VL's attention RMS-normalises each head's query and key before the rotation, and its DeepStack
features reach only the prompt's image tokens, which the prefill holds; ERNIE-4.5's query, key and value, and its
gate and up, are separate layers, each its own product) in the same order, so the logits equal the model's own
forward up to float rounding of the reordered products (``tests/test_rollout.py``, ``tests/test_qwen3_vl.py``,
``tests/test_paddleocr_vl.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import paddle
from paddle import _C_ops
from paddleformers.nn.lm_head import LMHead
from paddleformers.nn.mlp import MLP
from paddleformers.peft.lora.lora_layers import LoRALinear

from ..models.families import FAMILIES, ModelFamily, family_of
from ..models.forward import RepeatedPrompt, text_decoder, text_positions
from ..cpu_math import has_avx512
from ..models.rms_norm import computes_rms_norm, rms_norm
from ..models.text_attention import rotate, softmax_float32
from .cuda_graphs import GraphedDecoder, capture_hazard, graphs_off
from .kv_cache import StaticKVCache, TransposedKVCache
from .packed_products import packed


PACK_AFTER_STEPS = 8  # tokens decoded before the weights are packed, unless told (see the module docstring)


def make_decoder(model, prompt: RepeatedPrompt, prompt_mask: paddle.Tensor, next_position: paddle.Tensor,
                 max_new_tokens: int, engine: str = "auto", pack_after: int = PACK_AFTER_STEPS,
                 cuda_graphs: bool = False, bf16_products: bool = False):
    """The decode step for ``model`` with its cache holding ``prompt`` (keys and values already repeated per
    completion; ``prompt_mask`` [rows, prompt_len]) and room for ``max_new_tokens``; the completions' M-RoPE
    positions start at ``next_position`` [rows]. ``engine`` (config key ``rollout_engine``): ``one_token``,
    ``layers``, or ``auto``: ``one_token`` where it runs, else ``layers``. ``pack_after``: tokens ``one_token``
    decodes before packing its weights (CPU; see the module docstring), in bfloat16 with ``bf16_products``
    (``rollout_bf16_products``: ``onednn.py``). ``cuda_graphs`` (``rollout_cuda_graphs``): ``one_token``'s steps
    replayed as CUDA graphs where ``graphs_apply`` says they can be."""
    runs = supports(model)
    if engine == "one_token" and not runs:
        raise ValueError(f"rollout_engine one_token {ONE_TOKEN_RUNS}; use rollout_engine auto or layers here")
    if runs and engine != "layers":
        decoder = OneTokenDecoder(model, prompt, prompt_mask, next_position, max_new_tokens, pack_after,
                                  bf16_products)
        return GraphedDecoder(decoder) if cuda_graphs and graphs_apply(decoder) else decoder
    return LayerDecoder(model, prompt, prompt_mask, next_position, max_new_tokens)


def graphs_apply(decoder: "OneTokenDecoder") -> bool:
    """Whether ``decoder``'s steps can be replayed as CUDA graphs here: on a GPU (its cache written at the device's
    slot), in a process whose graphs no failed check turned off (``cuda_graphs.graphs_off``) and whose setitem reads
    no host memory (``cuda_graphs.capture_hazard``)."""
    cache = decoder.cache
    return (cache.mask.place.is_gpu_place() and cache.writes_at_device_slot and graphs_off() is None
            and capture_hazard() is None)


class LayerDecoder:
    """Any decoder: the model's own layers over a ``StaticKVCache`` (``rollout_engine: layers``, and a decoder the
    one-token step does not run)."""

    def __init__(self, model, prompt: RepeatedPrompt, prompt_mask: paddle.Tensor, next_position: paddle.Tensor,
                 max_new_tokens: int):
        self.model, self.next_position, self.steps = model, next_position, 0
        self.cache = StaticKVCache(prompt, prompt_mask, prompt_mask.shape[1] + max_new_tokens)

    def step(self, token: paddle.Tensor) -> paddle.Tensor:
        """Next-token logits [rows, vocab] after ``token`` [rows], the next completion token of each row."""
        text = text_decoder(self.model)
        self.cache.open_next()
        hidden = text.embed_tokens(token.unsqueeze(-1))
        position_embeddings = text.rotary_emb(hidden, text_positions(self.next_position + self.steps, 1))
        for layer in text.layers:
            hidden = layer(hidden, attention_mask=self.cache.mask, position_embeddings=position_embeddings,
                           past_key_values=self.cache, use_cache=True)[0]
        self.cache.advance()
        self.steps += 1
        return self.model.lm_head(text.norm(hidden))[:, -1]


@dataclass
class Projection:
    """A linear layer's weight as the decode step multiplies it: as stored, or packed once ``pack`` was called;
    with a LoRA layer's adapters in use, x W + b + (x A) B * scaling, as paddleformers' ``LoRALinear`` computes it
    (its dropout is the identity in eval mode)."""

    weight: paddle.Tensor
    bias: Optional[paddle.Tensor]
    lora: Optional[tuple] = None  # (A [in, r], B [r, out], scaling)
    packed: Optional[object] = None  # a PackedWeight or a OneDNNWeight (``packed_products.packed``)

    @classmethod
    def of(cls, linear: paddle.nn.Linear) -> "Projection":
        adapters = type(linear) is LoRALinear and not (linear.disable_lora or linear.merged)
        return cls(linear.weight, linear.bias, (linear.lora_A, linear.lora_B, linear.scaling) if adapters else None)

    def pack(self, rows: int, bf16: bool = False) -> None:
        """Multiply by the weight packed for ``rows``-row products from now on, where it can be: in float32, or in
        bfloat16 with ``bf16`` (``packed_products.packed``)."""
        self.packed = packed(self.weight, rows, bf16=bf16)

    def __call__(self, x: paddle.Tensor) -> paddle.Tensor:
        if self.packed is not None:
            out = self.packed(x) if self.bias is None else _C_ops.add(self.packed(x), self.bias)
        elif self.bias is None:
            out = _C_ops.matmul(x, self.weight, False, False)
        else:  # one kernel for the product and the bias
            out = _C_ops.linear(x, self.weight, self.bias)
        if self.lora is not None:
            lora_a, lora_b, scaling = self.lora
            out = out + (x @ lora_a @ lora_b) * scaling
        return out


@dataclass
class LayerWeights:
    input_norm: paddle.Tensor
    qkv: list[Projection]  # one fused product (Qwen's qkv_proj: per key/value head its queries, key, value) or q, k, v
    out: Projection
    post_norm: paddle.Tensor
    gate_up: list[Projection]  # one fused product (gate, then up) or gate and up
    down: Projection
    query_norm: Optional[paddle.Tensor] = None  # Qwen3's RMSNorm weights over each head's query and key
    key_norm: Optional[paddle.Tensor] = None

    @classmethod
    def of(cls, layer, family: ModelFamily) -> "LayerWeights":
        attention, mlp, qk_norm = layer.self_attn, layer.mlp, family.memory.qk_norm
        qkv = _qkv_layers(attention, family)
        return cls(input_norm=layer.input_layernorm.weight, qkv=[Projection.of(p) for p in qkv],
                   out=Projection.of(attention.o_proj), post_norm=layer.post_attention_layernorm.weight,
                   gate_up=[Projection.of(p) for p in _gate_up_layers(mlp)], down=Projection.of(mlp.down_proj),
                   query_norm=attention.q_norm.weight if qk_norm else None,
                   key_norm=attention.k_norm.weight if qk_norm else None)

    @property
    def projections(self) -> list[Projection]:
        return [*self.qkv, self.out, *self.gate_up, self.down]


def _qkv_layers(attention, family: ModelFamily) -> list:
    fused = family.memory.fused_projections
    return [attention.qkv_proj] if fused else [attention.q_proj, attention.k_proj, attention.v_proj]


def _gate_up_layers(mlp) -> list:
    return [getattr(mlp, mlp.gate_up_proj_name)] if mlp.fuse_up_gate else [mlp.gate_proj, mlp.up_proj]


def _projections(layer, family: ModelFamily) -> list:
    return [*_qkv_layers(layer.self_attn, family), layer.self_attn.o_proj, *_gate_up_layers(layer.mlp),
            layer.mlp.down_proj]


_ONE_TOKEN_TITLES = [f.title for f in FAMILIES.values() if f.one_token_attention is not None]
ONE_TOKEN_RUNS = (f"runs the {', '.join(_ONE_TOKEN_TITLES[:-1])} and {_ONE_TOKEN_TITLES[-1]} text decoders as "
                  "paddle_r1 loads them (paddleformers' RMSNorm, fused or not, the family's attention as paddle_r1 "
                  "installs it, plain or LoRA linear layers)")


def supports(model) -> bool:
    """Whether ``OneTokenDecoder`` can run ``model``'s decoder: in a family that names the attention the step
    reproduces (``ModelFamily.one_token_attention``), every layer's attention of exactly that class (a full one: no
    sliding window), RMSNorms that compute ``rms_norm(x, weight, epsilon)`` (paddleformers' fused kernel on a GPU,
    ``FastRMSNorm`` where that kernel is missing: the step reads only their weights and epsilon), Qwen3's query and
    key norms among them, the gated MLP with fused gate/up weights, and every projection an ``nn.Linear`` or
    paddleformers' ``LoRALinear`` exactly (any other layer's forward may add what this step would leave out)."""
    family = family_of(model)
    if family.one_token_attention is None:
        return False
    attention = family.one_token_attention.load()
    text = text_decoder(model)
    if not computes_rms_norm(text.norm):
        return False
    return all(type(layer.self_attn) is attention and layer.self_attn.decodes_one_token()
               and computes_rms_norm(layer.input_layernorm) and computes_rms_norm(layer.post_attention_layernorm)
               and (not family.memory.qk_norm or (computes_rms_norm(layer.self_attn.q_norm)
                                                  and computes_rms_norm(layer.self_attn.k_norm)))
               and isinstance(layer.mlp, MLP)
               and all(type(linear) in (paddle.nn.Linear, LoRALinear) for linear in _projections(layer, family))
               for layer in text.layers)


def _fused_rms_norm(x: paddle.Tensor, weight: paddle.Tensor, epsilon: float,
                    residual: Optional[paddle.Tensor] = None) -> tuple:
    """rms_norm(x + residual) * weight over the last axis, and x + residual (``paddle.incubate.nn.functional.
    fused_rms_norm``'s kernel, called without its wrapper)."""
    return _C_ops.fused_rms_norm_quant(x, None, residual, weight, None, epsilon, len(x.shape) - 1, -1.0, 0, 0.0, 0.0)


def _composed_rms_norm(x: paddle.Tensor, weight: paddle.Tensor, epsilon: float,
                       residual: Optional[paddle.Tensor] = None) -> tuple:
    """``_fused_rms_norm``'s two results from separate kernels: rms_norm(x + residual) * weight, and x + residual
    (in float32 as ``_C_ops`` calls, without the wrappers ``rms_norm`` goes through: the same numbers, faster)."""
    total = x if residual is None else _C_ops.add(x, residual)
    if total.dtype != paddle.float32:
        return rms_norm(total, weight, epsilon), total
    inverse = _C_ops.rsqrt(_C_ops.scale(_C_ops.mean(_C_ops.multiply(total, total), [-1], True), 1.0, epsilon, True))
    return _C_ops.multiply(_C_ops.multiply(total, inverse), weight), total


def fused_rms_norm_runs(place) -> bool:
    """Whether ``fused_rms_norm``'s kernel runs on ``place``: everywhere Paddle registers it but on a CPU without
    AVX-512, where its CPU kernel (``RmsNormAvxKernel``, AVX-512 instructions whatever the processor, Paddle 3.3.1)
    stops the process with an illegal instruction (an AMD EPYC before Zen 4, say)."""
    return not place.is_cpu_place() or has_avx512()


def packed_head(head, rows: int, bf16: bool = False):
    """The LM head's weight [vocab, hidden] packed for ``rows``-row products (in bfloat16 with ``bf16``), where it is
    paddleformers' plain head (no bias, no tensor or sequence parallelism: its forward is then x @ W^T) and
    ``packed_products.packed`` takes it; else None."""
    config = getattr(head, "config", None)
    plain = (type(head) is LMHead and head.bias is None and config is not None
             and config.get("tensor_model_parallel_size", 1) == 1 and not config.get("sequence_parallel", False)
             and not config.get("use_fused_head_and_loss_fn", False))
    return packed(head.weight, rows, transposed=True, bf16=bf16) if plain else None


class OneTokenDecoder:
    """The text decoder's weights arranged for one-token steps (see the module docstring), over a
    ``TransposedKVCache``. Made per rollout: the policy's weights change between rollouts."""

    def __init__(self, model, prompt: RepeatedPrompt, prompt_mask: paddle.Tensor, next_position: paddle.Tensor,
                 max_new_tokens: int, pack_after: int = PACK_AFTER_STEPS, bf16_products: bool = False):
        text = text_decoder(model)
        attention = text.layers[0].self_attn
        self.model, self.text = model, text
        self.heads, self.kv_heads = attention.num_heads, attention.num_key_value_heads
        self.head_dim = attention.head_dim
        self.scaling = attention.scaling
        self.epsilon = text.norm.variance_epsilon
        self.rms_norm = _fused_rms_norm if fused_rms_norm_runs(text.norm.weight.place) else _composed_rms_norm
        act_fn = text.layers[0].mlp.act_fn  # a layer's call costs more than its kernel at one token a row
        self.activation = _C_ops.silu if type(act_fn) is paddle.nn.Silu else act_fn
        embedding = text.embed_tokens
        # a plain Embedding's lookup is its kernel with the padding row (zeros out; -1: none) as F.embedding passes it
        self.embedding, self.padding_row = embedding, None
        if type(embedding) is paddle.nn.Embedding and embedding._max_norm is None:
            padding = embedding._padding_idx
            self.padding_row = -1 if padding is None else padding % embedding._num_embeddings
        rows, prompt_len = prompt_mask.shape
        family = family_of(model)
        self.layers = [LayerWeights.of(layer, family) for layer in text.layers]
        self.head_epsilon = attention.q_norm.variance_epsilon if family.memory.qk_norm else None
        capacity = prompt_len + max_new_tokens
        self.cache = TransposedKVCache(prompt, prompt_mask, capacity)
        self.head = None  # packed with the layers' weights (``_pack``)
        self.steps, self.pack_after, self.bf16_products = 0, pack_after, bf16_products
        # cos and sin [rows, 1, capacity, head_dim] of the text position each cache slot's token takes (the prompt's
        # slots unused), in one call; a step takes the row of its slot
        probe = paddle.zeros([1], dtype=model.lm_head.weight.dtype)
        self.cos, self.sin = attention.rotary_rows(*text.rotary_emb(probe, text_positions(next_position - prompt_len,
                                                                                          capacity)))
        self.value_cos = paddle.ones([rows, 1, 1, self.head_dim], dtype=probe.dtype)
        self.value_sin = paddle.zeros([rows, 1, 1, self.head_dim], dtype=probe.dtype)

    def _rotation(self, table: paddle.Tensor, value_part: paddle.Tensor) -> paddle.Tensor:
        """This step's cos or sin over a layer's whole qkv product [rows, kv_heads, groups + 2, head_dim]: the query
        heads' times the attention's scaling (folded into the query: q k * s == (q s) k up to rounding), the key's,
        and ``value_part`` (1 or 0: the value passes unrotated)."""
        rows, groups = value_part.shape[0], self.heads // self.kv_heads
        row = _C_ops.index_select(table, self.cache.slot, 2)  # [rows, 1, 1, head_dim]
        query_part = _C_ops.expand(_C_ops.scale(row, self.scaling, 0.0, True), [rows, 1, groups, self.head_dim])
        merged = _C_ops.concat([query_part, row, value_part], 2)
        return _C_ops.expand(merged, [rows, self.kv_heads, groups + 2, self.head_dim])

    def step(self, token: paddle.Tensor) -> paddle.Tensor:
        """Next-token logits [rows, vocab] after ``token`` [rows], the next completion token of each row.

        Per layer: the norms are fused with the residual adds before them (``fused_rms_norm`` where its kernel runs),
        the query, key and value are rotated together in one pass (the value with cos 1, sin 0); the rotary
        tables and the mask are laid out once per step, not per layer. The step calls Paddle's operators
        (``_C_ops``) without their Python wrappers, whose argument handling cost 5% of the step at the speed anchor's
        sizes on CPU; the kernels and the numbers are the same."""
        self.prepare(token.shape[0])
        logits = self.compute(token)
        self.count()
        return logits

    def prepare(self, rows: int) -> None:
        """The host's work before a step: the weights packed at step ``pack_after``, the cache grown when full."""
        if self.steps == self.pack_after:
            self._pack(rows)
        self.cache.make_room()

    def compute(self, token: paddle.Tensor) -> paddle.Tensor:
        """The device's work of a step (what a CUDA graph captures, ``cuda_graphs.GraphedDecoder``): no host reads
        and no host state changed where the cache writes at its device slot (``writes_at_device_slot``)."""
        rows, groups, cache = token.shape[0], self.heads // self.kv_heads, self.cache
        cache.open_slot()
        cos, sin = self._rotation(self.cos, self.value_cos), self._rotation(self.sin, self.value_sin)
        mask = _C_ops.expand(cache.mask, [rows, self.kv_heads, groups, cache.mask.shape[-1]])
        heads_shape, merged_shape = [rows, self.kv_heads, groups + 2, self.head_dim], [rows, self.heads * self.head_dim]
        residual = self._embed(token)  # [rows, hidden]
        hidden = self.rms_norm(residual, self.layers[0].input_norm, self.epsilon)[0]
        for index, layer in enumerate(self.layers):
            mixed = self._heads(layer.qkv, hidden, heads_shape)
            if layer.query_norm is not None:  # Qwen3: each head's query and key normalised before the rotation
                query, key, value = _C_ops.split(mixed, [groups, 1, 1], 2)
                mixed = _C_ops.concat([self.rms_norm(query, layer.query_norm, self.head_epsilon)[0],
                                       self.rms_norm(key, layer.key_norm, self.head_epsilon)[0], value], 2)
            mixed = rotate(mixed, cos, sin)
            query, key, value = _C_ops.split(mixed, [groups, 1, 1], 2)
            keys, values = cache.write(index, key, value)
            probs = softmax_float32(_C_ops.add(_C_ops.matmul(query, keys, False, False), mask))
            attended = _C_ops.reshape(_C_ops.matmul(probs, values, False, False), merged_shape)
            hidden, residual = self.rms_norm(layer.out(attended), layer.post_norm, self.epsilon, residual)[:2]
            gate, up = self._gate_up(layer.gate_up, hidden)
            down = layer.down(_C_ops.multiply(self.activation(gate), up))
            next_norm = self.layers[index + 1].input_norm if index + 1 < len(self.layers) else self.text.norm.weight
            hidden, residual = self.rms_norm(down, next_norm, self.epsilon, residual)[:2]
        cache.advance_slot()
        return self.model.lm_head(hidden) if self.head is None else self.head(hidden)

    def count(self) -> None:
        """The host's work after a step: its slot and itself counted."""
        self.cache.count_slot()
        self.steps += 1

    @staticmethod
    def _heads(qkv: list[Projection], hidden: paddle.Tensor, shape: list[int]) -> paddle.Tensor:
        """The layer's queries, keys and values [rows, kv_heads, groups + 2, head_dim], per key/value head its query
        heads, its key and its value: a fused product's columns come in that order; separate products are laid so."""
        if len(qkv) == 1:
            return _C_ops.reshape(qkv[0](hidden), shape)
        rows, kv_heads, slots, head_dim = shape
        parts = zip(qkv, [slots - 2, 1, 1])
        return _C_ops.concat([_C_ops.reshape(p(hidden), [rows, kv_heads, n, head_dim]) for p, n in parts], 2)

    @staticmethod
    def _gate_up(gate_up: list[Projection], hidden: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
        """The MLP's gate and up products: a fused product's two halves, or the two products."""
        if len(gate_up) == 1:
            return _C_ops.split_with_num(gate_up[0](hidden), 2, 1)
        return gate_up[0](hidden), gate_up[1](hidden)

    def _embed(self, token: paddle.Tensor) -> paddle.Tensor:
        """The tokens' embeddings [rows, hidden]: the lookup kernel itself where the layer is a plain ``Embedding``."""
        if self.padding_row is None:
            return self.embedding(token)
        return _C_ops.embedding(token, self.embedding.weight, self.padding_row, False)

    def _pack(self, rows: int) -> None:
        """Every projection's weight and the LM head's packed for ``rows``-row products (see the module docstring),
        in bfloat16 with ``bf16_products``."""
        for layer in self.layers:
            for projection in layer.projections:
                projection.pack(rows, self.bf16_products)
        self.head = packed_head(self.model.lm_head, rows, self.bf16_products)

