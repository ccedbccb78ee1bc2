import numpy as np
import paddle
import pytest

from paddle_r1.generation.generator import build_prompt_batch
from paddle_r1.generation.rollout import (SamplingParams, completion_mask_from_ids, pick_next_token,
                                       sample_completions)

TEMPLATE = "{Question} Answer with a box."


def _prompts(tiny, rec_samples, n=3):
    model, processor = tiny
    # samples of different image sizes, so prompts differ in length and get left padding
    return build_prompt_batch(rec_samples[:n], processor, TEMPLATE)


def _eos(processor):
    return [processor.tokenizer.eos_token_id], processor.tokenizer.pad_token_id


@paddle.no_grad()
def _uncached_greedy(model, prompt, steps, eos_id):
    """Reference: the whole sequence through the model's own forward at every step (no cache,
    positions computed by the model from input_ids and image_grid_thw)."""
    ids, mask = prompt.input_ids, prompt.attention_mask
    finished = np.zeros(ids.shape[0], bool)
    out = []
    for _ in range(steps):
        model.model.rope_deltas = None
        logits = model(input_ids=ids, attention_mask=mask, pixel_values=prompt.pixel_values,
                       image_grid_thw=prompt.image_grid_thw).logits[:, -1]
        token = logits.argmax(-1).numpy()
        token[finished] = 0
        finished |= token == eos_id
        out.append(token)
        ids = paddle.concat([ids, paddle.to_tensor(token).unsqueeze(1)], axis=1)
        mask = paddle.concat([mask, paddle.ones([ids.shape[0], 1], dtype=mask.dtype)], axis=1)
    return np.stack(out, axis=1)


def test_cached_greedy_equals_uncached(tiny, rec_samples):
    model, processor = tiny
    prompt, facts = _prompts(tiny, rec_samples)
    assert len({int(m.sum()) for m in prompt.attention_mask}) > 1  # left padding is exercised
    eos, pad = _eos(processor)
    rollout = sample_completions(model, prompt, 2, SamplingParams(max_new_tokens=12, temperature=0.0), eos, pad)
    reference = _uncached_greedy(model, prompt, 12, eos[0])
    got = rollout.completion_ids.numpy()
    assert got.shape == (6, 12)
    for row in range(6):
        n = int(rollout.completion_mask[row].sum())
        np.testing.assert_array_equal(got[row, :n], reference[row // 2, :n])


def test_sampling_groups_masks_and_lengths(tiny, rec_samples):
    model, processor = tiny
    prompt, _ = _prompts(tiny, rec_samples, n=2)
    eos, pad = _eos(processor)
    paddle.seed(1)
    rollout = sample_completions(model, prompt, 4, SamplingParams(max_new_tokens=10, temperature=1.0), eos, pad)
    ids, mask = rollout.completion_ids.numpy(), rollout.completion_mask.numpy()
    assert ids.shape[0] == 8 and ids.shape[1] <= 10
    assert len({tuple(r) for r in ids[:4]}) > 1  # samples within a group differ
    for row, m, truncated in zip(ids, mask, rollout.truncated.numpy()):
        n = int(m.sum())
        assert (m[:n] == 1).all() and (m[n:] == 0).all()
        if truncated:
            assert n == len(row) and eos[0] not in row
        else:
            assert row[n - 1] == eos[0] and (row[n:] == pad).all()
    paddle.seed(1)
    again = sample_completions(model, prompt, 4, SamplingParams(max_new_tokens=10, temperature=1.0), eos, pad)
    np.testing.assert_array_equal(again.completion_ids.numpy(), ids)  # seeded: reproducible


def test_top_k_one_is_greedy(tiny, rec_samples):
    model, processor = tiny
    prompt, _ = _prompts(tiny, rec_samples, n=2)
    eos, pad = _eos(processor)
    greedy = sample_completions(model, prompt, 2, SamplingParams(8, temperature=0.0), eos, pad)
    top1 = sample_completions(model, prompt, 2, SamplingParams(8, temperature=1.5, top_k=1), eos, pad)
    np.testing.assert_array_equal(greedy.completion_ids.numpy(), top1.completion_ids.numpy())


def test_completion_mask_stops_after_first_eos():
    ids = paddle.to_tensor([[5, 7, 2, 0, 0], [5, 5, 5, 5, 5], [2, 0, 0, 0, 0]])
    mask = completion_mask_from_ids(ids, paddle.to_tensor([2]))
    assert mask.numpy().tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]


def _frequencies(logits, params, n=4000):
    paddle.seed(0)
    batch = paddle.to_tensor(np.repeat(np.asarray([logits], "float32"), n, axis=0))
    picks = pick_next_token(batch, params).numpy()
    return np.bincount(picks, minlength=len(logits)) / n


def test_temperature_top_k_top_p():
    logits = np.log(np.asarray([0.5, 0.3, 0.15, 0.05]))
    freq = _frequencies(logits, SamplingParams(1, temperature=1.0))
    np.testing.assert_allclose(freq, [0.5, 0.3, 0.15, 0.05], atol=0.03)
    hot = np.exp(logits / 2.0) / np.exp(logits / 2.0).sum()
    np.testing.assert_allclose(_frequencies(logits, SamplingParams(1, temperature=2.0)), hot, atol=0.03)
    top2 = _frequencies(logits, SamplingParams(1, temperature=1.0, top_k=2))
    np.testing.assert_allclose(top2, [0.625, 0.375, 0, 0], atol=0.03)
    # top_p = 0.7: 0.5 alone is below 0.7, so 0.3 joins; 0.15 is dropped (0.8 above it already)
    nucleus = _frequencies(logits, SamplingParams(1, temperature=1.0, top_p=0.7))
    np.testing.assert_allclose(nucleus, [0.625, 0.375, 0, 0], atol=0.03)
    assert _frequencies(logits, SamplingParams(1, temperature=1.0, top_p=0.01))[0] == 1.0


def test_given_uniforms_fix_each_rows_draw(tiny, rec_samples):
    """Row i's tokens depend only on its own uniforms: the same prompt gives the same completion whether it
    is sampled alone or in a batch (what makes N ranks equal one process)."""
    model, processor = tiny
    eos, pad = _eos(processor)
    params = SamplingParams(max_new_tokens=6, temperature=1.0, top_p=0.9)
    u = paddle.to_tensor(np.random.default_rng(0).random((4, 6)).astype("float32"))
    prompt, _ = _prompts(tiny, rec_samples[:1], n=1)
    alone = sample_completions(model, prompt, 2, params, eos, pad, uniforms=u[2:])
    pair, _ = build_prompt_batch([rec_samples[1], rec_samples[0]], processor, TEMPLATE)
    batched = sample_completions(model, pair, 2, params, eos, pad, uniforms=u)
    n = int(alone.completion_mask[0].sum())
    np.testing.assert_array_equal(batched.completion_ids.numpy()[2:, :n], alone.completion_ids.numpy()[:, :n])
    assert batched.completion_ids.numpy()[0].tolist() != batched.completion_ids.numpy()[1].tolist()


def test_inverse_cdf_draw_matches_the_distribution():
    logits = np.log(np.asarray([0.5, 0.3, 0.15, 0.05]))
    n = 4000
    batch = paddle.to_tensor(np.repeat(np.asarray([logits], "float32"), n, axis=0))
    u = paddle.to_tensor(np.random.default_rng(1).random(n).astype("float32"))
    picks = pick_next_token(batch, SamplingParams(1, temperature=1.0), u).numpy()
    np.testing.assert_allclose(np.bincount(picks, minlength=4) / n, [0.5, 0.3, 0.15, 0.05], atol=0.03)


@pytest.mark.parametrize("engine", ["layers", "one_token_packed", "one_token_plain", "one_token_growing",
                                    "one_token_separate_norms"])
def test_static_cache_decode_equals_the_models_own_cached_forward(tiny, rec_samples, engine, monkeypatch):
    """Both decode steps over their preallocated caches (prefilled once per prompt, rows repeated) give the logits
    of paddleformers' forward with its growing DynamicCache over the repeated prompt: the model's own layers
    (``LayerDecoder``) and the plain-tensor step over transposed keys (``OneTokenDecoder``, whose write slot and
    rotary row live on the device: the same call, step after step, moves through the cache), with its weights
    as stored for its first steps and packed for MKL from then on, its cache slots written by MKL (CPU), or as stored
    throughout, its cache written by setitem at the device slot (``one_token_plain``, a GPU's way). In
    ``one_token_growing`` its cache holds room for 2 tokens and grows by 2 at the third step: the fourth slot is still
    closed then. Its norms and residual adds are the fused kernel where it runs (a CPU with AVX-512) and separate
    kernels elsewhere, and in ``one_token_separate_norms`` on every CPU."""
    from paddle_r1.cpu_math import has_avx512
    from paddle_r1.generation import decoder as decoders
    from paddle_r1.generation import kv_cache
    from paddle_r1.generation.decoder import LayerDecoder, OneTokenDecoder, supports
    from paddle_r1.generation.rollout import prefill
    from paddle_r1.models.forward import RepeatedPrompt, embed_inputs, repeat_rows, rope_positions, text_positions

    model, _ = tiny
    assert supports(model)
    prompt, _ = _prompts(tiny, rec_samples)
    g, steps = 2, 4
    tokens = paddle.to_tensor(np.random.default_rng(0).integers(0, 100, [prompt.size * g, steps]))
    with paddle.no_grad():
        cache, _, next_position = prefill(model, prompt)
        next_position = repeat_rows(next_position, g)
        mask = repeat_rows(prompt.attention_mask, g)
        rows = mask.shape[0]
        if engine == "one_token_growing":
            monkeypatch.setattr(kv_cache, "GROWTH", 2)
        fused_norms = engine != "one_token_separate_norms" and has_avx512()
        if engine == "one_token_separate_norms":
            monkeypatch.setattr(decoders, "fused_rms_norm_runs", lambda place: False)
        packed = engine != "one_token_plain"
        if not packed:
            monkeypatch.setattr(decoders, "packed", lambda *args, **kwargs: None)
            monkeypatch.setattr(kv_cache, "float32_on_cpu", lambda tensor: False)
        decoder = (LayerDecoder(model, RepeatedPrompt(cache, g), mask, next_position, steps + 1) if engine == "layers"
                   else OneTokenDecoder(model, RepeatedPrompt(cache, g), mask, next_position, steps + 1,
                                        pack_after=2))  # steps 0-1 as stored, 2-3 packed
        if engine != "layers":  # the cache written by MKL at the host count, or by setitem at the device slot
            assert (decoder.cache._open is not None) == packed
            assert decoder.rms_norm is (decoders._fused_rms_norm if fused_norms else decoders._composed_rms_norm)

        def packed_now() -> list:
            return [p.packed is not None for p in decoder.layers[0].projections] + [decoder.head is not None]
        grows = [decoder.cache.mask.shape[-1]]

        embeds = embed_inputs(model, prompt.input_ids, prompt.pixel_values, prompt.image_grid_thw).repeat(g)
        positions, _ = rope_positions(model, prompt.input_ids, prompt.attention_mask, prompt.image_grid_thw)
        dynamic = model(**embeds.model_inputs(), attention_mask=mask, position_ids=repeat_rows(positions, g, axis=1),
                        use_cache=True).past_key_values
        for step in range(steps):
            got = decoder.step(tokens[:, step])
            if engine != "layers":
                assert packed_now() == [packed and step >= 2] * 5
            mask = paddle.concat([mask, paddle.ones([rows, 1], dtype=mask.dtype)], axis=1)
            out = model(input_ids=tokens[:, step:step + 1], attention_mask=mask, past_key_values=dynamic,
                        position_ids=text_positions(next_position + step, 1), use_cache=True)
            dynamic = out.past_key_values
            np.testing.assert_allclose(got.numpy(), out.logits[:, -1].numpy(), atol=2e-5)
            grows.append(decoder.cache.mask.shape[-1])
    if engine == "one_token_growing":
        prompt_len = prompt.input_ids.shape[1]
        assert grows == [prompt_len + 2] * 3 + [prompt_len + 4] * 2  # slots allocated before each step, after the last


def test_both_engines_sample_the_same_completions(tiny, rec_samples):
    """rollout_engine one_token and layers: the same sampled tokens from the same random numbers."""
    model, processor = tiny
    prompt, _ = _prompts(tiny, rec_samples)
    eos, pad = _eos(processor)
    uniforms = paddle.to_tensor(np.random.default_rng(2).random([prompt.size * 4, 16]).astype("float32"))
    rollouts = [sample_completions(model, prompt, 4, SamplingParams(16, temperature=1.0, engine=engine), eos, pad,
                                   uniforms=uniforms) for engine in ("one_token", "layers")]
    np.testing.assert_array_equal(rollouts[0].completion_ids.numpy(), rollouts[1].completion_ids.numpy())
    np.testing.assert_array_equal(rollouts[0].completion_mask.numpy(), rollouts[1].completion_mask.numpy())


def test_log_probs_only_when_asked(tiny, rec_samples):
    """``SamplingParams.logprobs`` false: the same tokens from the same random numbers, no sampling_logp (a GRPO
    job asks for them when its importance-sampling correction reads them: tests/test_sampler_correction.py)."""
    model, processor = tiny
    prompt, _ = _prompts(tiny, rec_samples)
    eos, pad = _eos(processor)
    uniforms = paddle.to_tensor(np.random.default_rng(3).random([prompt.size * 2, 8]).astype("float32"))
    with_logp, without = (sample_completions(model, prompt, 2, SamplingParams(8, temperature=1.0, logprobs=asked),
                                             eos, pad, uniforms=uniforms) for asked in (True, False))
    assert with_logp.sampling_logp is not None and without.sampling_logp is None
    np.testing.assert_array_equal(with_logp.completion_ids.numpy(), without.completion_ids.numpy())


def test_lora_adapters_shape_the_one_token_rollout(tiny_model_dir, tiny, rec_samples):
    """The one-token step adds each LoRA layer's x A B * scaling as ``LoRALinear`` does: greedy completions of a model
    with (random, non-zero) adapters equal its uncached forward's and the layers' sampled ones, and differ from the
    base model's."""
    from paddle_r1.generation.decoder import supports
    from paddle_r1.models.loading import load_model
    from paddle_r1.models.lora import apply_lora, lora_layers

    model = load_model(tiny_model_dir)
    apply_lora(model, rank=2, alpha=4)
    rng = np.random.default_rng(0)
    for layer in lora_layers(model).values():
        layer.lora_B.set_value(paddle.to_tensor(rng.normal(0, 1, layer.lora_B.shape), dtype=layer.lora_B.dtype))
    assert supports(model)
    prompt, _ = _prompts(tiny, rec_samples)
    eos, pad = _eos(tiny[1])
    rollout = sample_completions(model, prompt, 1, SamplingParams(8, temperature=0.0, engine="one_token"), eos, pad)
    adapted, reference = rollout.completion_ids.numpy(), _uncached_greedy(model, prompt, 8, eos[0])
    for row, length in enumerate(rollout.completion_mask.sum(axis=1).tolist()):
        np.testing.assert_array_equal(adapted[row, :length], reference[row, :length])
    uniforms = paddle.to_tensor(np.random.default_rng(3).random([prompt.size * 2, 12]).astype("float32"))
    sampled = [sample_completions(model, prompt, 2, SamplingParams(12, temperature=1.0, engine=engine), eos, pad,
                                  uniforms=uniforms).completion_ids.numpy() for engine in ("one_token", "layers")]
    np.testing.assert_array_equal(sampled[0], sampled[1])
    base = sample_completions(tiny[0], prompt, 1, SamplingParams(8, temperature=0.0), eos, pad).completion_ids.numpy()
    assert adapted.shape != base.shape or not np.array_equal(adapted, base)  # the adapters change the completions


def test_checking_eos_every_k_steps_gives_the_same_completions(tiny, rec_samples):
    """Rows end at different steps, all before step 8 (the EOS ids: each row's sixth token when nothing stops
    it); reading ``finished`` on the host every 8 steps instead of every step changes nothing: the completions
    are cut where the last row ended."""
    model, processor = tiny
    prompt, _ = _prompts(tiny, rec_samples)
    _, pad = _eos(processor)
    params = SamplingParams(max_new_tokens=20, temperature=1.0)
    uniforms = paddle.to_tensor(np.random.default_rng(1).random([prompt.size * 4, 20]).astype("float32"))
    free = sample_completions(model, prompt, 4, params, [-1], pad, uniforms=uniforms)
    eos = sorted(set(free.completion_ids.numpy()[:, 5].tolist()))
    every_step = sample_completions(model, prompt, 4, params, eos, pad, uniforms=uniforms, eos_check_every=1)
    every_8 = sample_completions(model, prompt, 4, params, eos, pad, uniforms=uniforms)
    lengths = every_step.completion_mask.sum(axis=1).numpy()
    assert len(set(lengths.tolist())) > 1 and lengths.max() <= 6  # rows end apart, all before the first check
    for field in ("completion_ids", "completion_mask", "truncated"):
        np.testing.assert_array_equal(getattr(every_step, field).numpy(), getattr(every_8, field).numpy())


@pytest.mark.parametrize("pack_after", [0, 3])
def test_the_rollout_packs_the_weights_after_the_tokens_it_is_told(tiny, rec_samples, monkeypatch, pack_after):
    """``SamplingParams.pack_after`` reaches the decode step: the weights are packed before the token it names (the
    trainer's 0: before the first), and the completions are the same as the default's."""
    from paddle_r1.generation import decoder as decoders

    model, processor = tiny
    prompt, _ = _prompts(tiny, rec_samples)
    eos, pad = _eos(processor)
    packed_at = []
    pack = decoders.OneTokenDecoder._pack
    monkeypatch.setattr(decoders.OneTokenDecoder, "_pack", lambda self, rows: (packed_at.append(self.steps),
                                                                                 pack(self, rows)))
    told = sample_completions(model, prompt, 2, SamplingParams(10, temperature=0.0, pack_after=pack_after,
                                                               engine="one_token"), [-1], pad)
    assert packed_at == [pack_after]
    default = sample_completions(model, prompt, 2, SamplingParams(10, temperature=0.0), [-1], pad)
    assert packed_at == [pack_after, decoders.PACK_AFTER_STEPS]
    np.testing.assert_array_equal(told.completion_ids.numpy(), default.completion_ids.numpy())


def test_the_decode_steps_lookup_keeps_the_embeddings_padding_row(tiny, rec_samples):
    """The decode step looks tokens up with Paddle's kernel directly; Paddle's ``Embedding`` outputs zeros for its
    padding row (paddleformers passes the config's pad_token_id), and so does the step, bit-equal to the layer's
    lookup for every token, and for a layer without a padding row."""
    from paddle_r1.generation.decoder import OneTokenDecoder
    from paddle_r1.generation.rollout import prefill
    from paddle_r1.models.forward import RepeatedPrompt, text_decoder

    model, processor = tiny
    prompt, _ = _prompts(tiny, rec_samples, n=1)
    embedding = text_decoder(model).embed_tokens
    tokens = paddle.arange(0, embedding.weight.shape[0], 7, dtype="int64")
    with paddle.no_grad():
        cache, _, next_position = prefill(model, prompt)
        for padding in (embedding._padding_idx, 7, None):
            saved = embedding._padding_idx
            embedding._padding_idx = padding
            try:
                decoder = OneTokenDecoder(model, RepeatedPrompt(cache, 1), prompt.attention_mask, next_position, 2)
                got, want = decoder._embed(tokens).numpy(), embedding(tokens).numpy()
            finally:
                embedding._padding_idx = saved
            np.testing.assert_array_equal(got, want)
            zeros = [int(t) for t, row in zip(tokens.numpy(), got) if not row.any()]
            assert zeros == ([] if padding is None else [padding])  # the padding row's token only


def test_a_family_without_the_one_token_step_decodes_by_its_layers(tiny, tiny_model_dir, rec_samples, tmp_path,
                                                                     monkeypatch, capsys):
    """A family whose decoder the one-token step does not reproduce (``ModelFamily.one_token_attention`` None, as a
    family added without it would be): auto takes the model's layers and the trainer says why; one_token is a
    ValueError in the rollout and a config error before a trainer's first step."""
    import dataclasses

    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.errors import ConfigError
    from paddle_r1.generation.decoder import supports
    from paddle_r1.models.families import FAMILIES
    from paddle_r1.trainer.grpo import GRPOTrainer

    model, processor = tiny
    assert supports(model)
    family = FAMILIES[model.config.model_type]
    monkeypatch.setitem(FAMILIES, family.model_type, dataclasses.replace(family, one_token_attention=None))
    assert not supports(model)
    prompt, _ = _prompts(tiny, rec_samples, n=1)
    params = SamplingParams(max_new_tokens=3, temperature=0.0)
    assert sample_completions(model, prompt, 2, params, [-1], 0).completion_ids.shape == [2, 3]
    params.engine = "one_token"
    with pytest.raises(ValueError, match="rollout_engine one_token runs the Qwen2-VL, Qwen2.5-VL, Qwen3-VL and "
                                         "PaddleOCR-VL text decoders"):
        sample_completions(model, prompt, 2, params, [-1], 0)
    settings = dict(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path), num_generations=2,
                    max_completion_length=4, max_steps=1, beta=0.0, use_visualdl=False)
    GRPOTrainer(GRPOConfig(**settings), samples=rec_samples)
    assert "rollout engine: layers (one_token runs the Qwen2-VL" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="config key 'rollout_engine': one_token .* needs auto or layers"):
        GRPOTrainer(GRPOConfig(**settings, rollout_engine="one_token"), samples=rec_samples)


def test_the_trainer_packs_before_the_first_token_unless_completions_are_capped_short(tiny_model_dir, rec_samples,
                                                                                        tmp_path):
    """A GRPO rollout packs the decode step's weights before its first token; with max_completion_length within
    PACK_AFTER_STEPS (too few tokens to repay the packing) it keeps the default, so it never packs."""
    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.generation.decoder import PACK_AFTER_STEPS
    from paddle_r1.trainer.grpo import GRPOTrainer

    packs = {}
    for cap in (PACK_AFTER_STEPS + 1, PACK_AFTER_STEPS):
        config = GRPOConfig(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path / str(cap)), num_generations=2,
                            max_completion_length=cap, max_steps=1, beta=0.0, use_visualdl=False)
        packs[cap] = GRPOTrainer(config, samples=rec_samples).sampling.pack_after
    assert packs == {PACK_AFTER_STEPS + 1: 0, PACK_AFTER_STEPS: PACK_AFTER_STEPS}
