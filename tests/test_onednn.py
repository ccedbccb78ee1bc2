"""oneDNN's prepacked products (generation/onednn.py): in bfloat16 they equal the float64 product of the operands
rounded to bf16, a product measurably unlike float32's; in float32 they equal Paddle's matmul; and
``rollout_bf16_products`` reaches the decode step from a rollout's ``SamplingParams`` and from the trainer. On a CPU
where oneDNN makes no bf16 product (no AVX-512) the bf16 tests are skipped and the fallback's are run."""
import os

import numpy as np
import paddle
import pytest

from paddle_r1.generation.onednn import OneDNNWeight, bf16_instructions, bf16_products_run, onednn

pytestmark = pytest.mark.skipif(onednn() is None, reason="this Paddle build ships no oneDNN library")
needs_bf16 = pytest.mark.skipif(not bf16_products_run(), reason="oneDNN makes no bf16 product on this CPU")
without_bf16 = pytest.mark.skipif(bf16_products_run(), reason="oneDNN makes bf16 products on this CPU")


def bf16_rounded(array: np.ndarray) -> np.ndarray:
    """float32 numbers rounded to the nearest bfloat16 (ties to even), as float64."""
    bits = array.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


@needs_bf16
@pytest.mark.parametrize("transposed", [False, True])
def test_a_bf16_product_is_the_product_of_the_bf16_rounded_operands(transposed):
    """x @ W for a linear weight [in, out], x @ W^T for a head's [out, in], a non-contiguous x read right: equal to
    float64 over the operands rounded to bf16 (float32 accumulation), and 1e-3 or more off float32's product."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal([48, 80] if transposed else [80, 48]).astype("float32")
    product = OneDNNWeight(paddle.to_tensor(weight), rows=6, transposed=transposed)
    assert (product.inner, product.outer) == (80, 48)
    wide = paddle.to_tensor(rng.standard_normal([6, 160]).astype("float32"))
    matrix = weight.T if transposed else weight
    for x in (wide[:, :80], wide[:, 80:].contiguous()):
        got = product(x).numpy()
        assert got.shape == (6, 48) and got.dtype == np.float32
        in_bf16 = bf16_rounded(x.numpy()) @ bf16_rounded(matrix)
        in_float32 = x.numpy().astype(np.float64) @ matrix
        scale = np.abs(in_float32).max()
        assert np.abs(got - in_bf16).max() < 1e-5 * scale
        assert np.abs(got - in_float32).max() > 1e-3 * scale


def test_a_float32_onednn_product_and_another_row_count_are_paddles():
    rng = np.random.default_rng(1)
    weight = paddle.to_tensor(rng.standard_normal([64, 40]).astype("float32"))
    x = paddle.to_tensor(rng.standard_normal([4, 64]).astype("float32"))
    np.testing.assert_allclose(OneDNNWeight(weight, 4, dtype="float32")(x).numpy(), (x @ weight).numpy(),
                               rtol=1e-5, atol=1e-5)
    other = paddle.to_tensor(rng.standard_normal([3, 64]).astype("float32"))  # packed for 4 rows: Paddle's product
    np.testing.assert_array_equal(OneDNNWeight(weight, 4, dtype="float32")(other).numpy(), (other @ weight).numpy())


def test_the_bf16_instructions_are_read_from_cpuinfo():
    text = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile amx_bf16\n\nprocessor\t: 1\nflags\t: fpu\n"
    assert bf16_instructions(text) == ["avx512_bf16", "amx_bf16"]
    assert bf16_instructions("flags\t: fpu avx2 avx512f\n") == []


def _rollouts_with_and_without_bf16_products(tiny, rec_samples) -> tuple:
    """({bf16: completion ids}, {bf16: sampling log-probs}) of two rollouts from the same random numbers."""
    from paddle_r1.generation.generator import build_prompt_batch
    from paddle_r1.generation.rollout import SamplingParams, sample_completions

    model, processor = tiny
    prompt, _ = build_prompt_batch(rec_samples[:2], processor, "{Question}")
    uniforms = paddle.to_tensor(np.random.default_rng(3).random([4, 6]).astype("float32"))
    runs = {}
    for bf16 in (False, True):
        params = SamplingParams(6, temperature=1.0, pack_after=0, engine="one_token", bf16_products=bf16)
        runs[bf16] = sample_completions(model, prompt, 2, params, [-1], processor.tokenizer.pad_token_id, uniforms)
    return ({bf16: run.completion_ids.numpy() for bf16, run in runs.items()},
            {bf16: run.sampling_logp.numpy() for bf16, run in runs.items()})


@needs_bf16
def test_rollout_bf16_products_reach_the_decode_step(tiny, rec_samples):
    """``SamplingParams.bf16_products``: from its second token (the first is drawn from the float32 prefill) a
    rollout's log-probs come from bf16 products, close to the float32 rollout's where the rows so far agree, not
    equal to them; the weights are cast once per rollout, so the policy itself is unchanged."""
    model, _ = tiny
    weight = model.lm_head.weight.numpy().copy()
    ids, logp = _rollouts_with_and_without_bf16_products(tiny, rec_samples)
    same_prefix = np.cumprod(ids[False] == ids[True], axis=1).astype(bool)  # the rows' tokens so far agree
    np.testing.assert_array_equal(logp[True][:, 0], logp[False][:, 0])
    gap = np.abs(logp[True] - logp[False])[:, 1:][same_prefix[:, :-1]]
    assert gap.size >= 8 and 1e-6 < gap.max() < 5e-2, gap
    np.testing.assert_array_equal(model.lm_head.weight.numpy(), weight)


@without_bf16
def test_where_onednn_makes_no_bf16_product_the_rollout_stays_float32(tiny, rec_samples):
    """No bf16 product to be had (a CPU without AVX-512): ``rollout_bf16_products`` packs the weights for MKL's float32
    products as without it, the same tokens and log-probs, and the trainer's line says the key is ignored."""
    ids, logp = _rollouts_with_and_without_bf16_products(tiny, rec_samples)
    np.testing.assert_array_equal(ids[True], ids[False])
    np.testing.assert_array_equal(logp[True], logp[False])


def test_the_trainer_passes_rollout_bf16_products_and_names_the_cpus_instructions(rollout_key_on_and_off):
    said = rollout_key_on_and_off("rollout_bf16_products")
    line = next(line for line in said[True][1].splitlines() if line.startswith("rollout engine: one_token"))
    found = bf16_instructions()
    if not bf16_products_run():
        assert "rollout_bf16_products ignored: oneDNN makes no bfloat16 product on this CPU" in line
    else:
        assert (f"; bf16 products ({', '.join(found)})" if found else "emulated") in line
        assert "importance_sampling_correction is false" in line
    assert said[True][0].bf16_products
    assert not said[False][0].bf16_products and "bf16" not in said[False][1]


def test_a_dropped_weight_gives_its_packed_copy_back():
    """Each rollout packs the weights anew: oneDNN's buffers are destroyed with their owner, so forty packings of a
    2 MiB bf16 copy (80 MiB if kept; a 4 MiB float32 one where oneDNN makes no bf16 product) leave the process's
    resident memory where one did."""
    import gc

    def resident_mib() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20

    weight, dtype = paddle.randn([512, 2048]), "bfloat16" if bf16_products_run() else "float32"
    for _ in range(5):
        OneDNNWeight(weight, 16, dtype=dtype)
    gc.collect()
    before = resident_mib()
    for _ in range(40):
        OneDNNWeight(weight, 16, dtype=dtype)
    gc.collect()
    assert resident_mib() - before < 20


def test_a_library_without_the_calls_used_here_counts_as_none(tmp_path, monkeypatch):
    """A oneDNN that does not load with the calls used here (another build's library: here a real shared library
    without them, Python's own _ctypes) is no oneDNN, so the products stay float32."""
    import _ctypes

    from paddle_r1.generation import onednn as module

    libs = tmp_path / "paddle" / "libs"
    libs.mkdir(parents=True)
    (libs / "libdnnl.so.3").symlink_to(_ctypes.__file__)
    monkeypatch.setattr(module.paddle, "__file__", str(tmp_path / "paddle" / "__init__.py"))
    module.onednn.cache_clear()
    try:
        assert module.onednn() is None
    finally:
        monkeypatch.undo()
        module.onednn.cache_clear()
    assert onednn() is not None
