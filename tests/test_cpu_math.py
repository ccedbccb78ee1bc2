"""Which MKL kernels paddle_r1 asks for, from /proc/cpuinfo's text (no timing here: benchmarks/grpo_step.py)."""
import os

from paddle_r1.cpu_math import has_avx512, mkl_cpu_type

AMD = "vendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse sse2 fma avx avx2\n"


def test_amd_with_avx2_and_fma_gets_mkls_avx2_kernels():
    assert mkl_cpu_type(AMD + "\n" + AMD) == "5"


def test_amd_with_skylakes_avx512_gets_mkls_avx512_kernels():
    avx512 = AMD.replace(" avx2", " avx2 avx512f avx512cd avx512bw avx512dq avx512vl avx512_bf16")
    assert mkl_cpu_type(avx512) == "7"
    assert mkl_cpu_type(avx512.replace(" avx512vl", "")) == "5"  # MKL's AVX-512 kernels use all five
    assert mkl_cpu_type(avx512.replace("AuthenticAMD", "GenuineIntel")) is None


def test_avx512_means_skylakes_five_sets():
    avx512 = AMD.replace(" avx2", " avx2 avx512f avx512cd avx512bw avx512dq avx512vl")
    assert has_avx512(avx512) and has_avx512(avx512.replace("AuthenticAMD", "GenuineIntel"))
    assert not has_avx512(AMD) and not has_avx512(avx512.replace(" avx512bw", "")) and not has_avx512("")


def test_paddles_fused_rms_norm_cpu_kernel_runs_exactly_where_the_decoder_takes_it():
    """The decode step fuses its norms only where the kernel runs (``fused_rms_norm_runs``): Paddle's CPU kernel is
    AVX-512 code whatever the processor, so on a CPU without AVX-512 the call stops its process with an illegal
    instruction (SIGILL, an exit of -4); with AVX-512 it returns x + residual and the norm. Run in a process of its
    own: should a Paddle release make the kernel run everywhere, this fails and the separate kernels can go."""
    import signal
    import subprocess
    import sys

    import paddle

    from paddle_r1.generation.decoder import fused_rms_norm_runs

    call = ("import paddle; from paddle import _C_ops; x = paddle.ones([2, 64]); "
            "out = _C_ops.fused_rms_norm_quant(x, None, x, paddle.ones([64]), None, 1e-6, 1, -1.0, 0, 0.0, 0.0); "
            "assert float(out[1].sum()) == 256.0 and abs(float(out[0].sum()) - 128.0) < 1e-3, out")
    result = subprocess.run([sys.executable, "-c", call], capture_output=True, text=True, timeout=300)
    assert fused_rms_norm_runs(paddle.CPUPlace()) == has_avx512()
    if has_avx512():
        assert result.returncode == 0, result.stderr[-2000:]
    else:
        assert result.returncode == -signal.SIGILL, (result.returncode, result.stderr[-2000:])


def test_intel_and_processors_without_avx2_are_left_to_mkl():
    assert mkl_cpu_type(AMD.replace("AuthenticAMD", "GenuineIntel")) is None
    assert mkl_cpu_type(AMD.replace(" avx2", "")) is None
    assert mkl_cpu_type(AMD.replace(" fma", "")) is None
    assert mkl_cpu_type("") is None


def test_importing_paddle_r1_changes_nothing_in_the_process():
    """No environment variable set, nothing asked of glibc, at import; a CPU job makes the settings."""
    import subprocess
    import sys

    # the libraries that add warning filters of their own when imported (scipy, urllib3, requests) come first
    check = ("import paddle, paddleformers, os, warnings, scipy.optimize, scipy.sparse, scipy.special, urllib3, "
             "requests; "
             "e = dict(os.environ); f = list(warnings.filters); "
             "import paddle_r1, paddle_r1.config.jobs, paddle_r1.rewards, paddle_r1.trainer.grpo, paddle_r1.cli; "
             "assert dict(os.environ) == e, set(os.environ.items()) ^ set(e.items()); "
             "assert warnings.filters == f, 'warning filters changed'")
    env = {k: v for k, v in os.environ.items() if k != "MKL_DEBUG_CPU_TYPE"}
    result = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_a_cpu_job_chooses_the_avx2_kernels_unless_told_not_to(tmp_path, tiny_model_dir, rec_jsonl, monkeypatch):
    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.trainer.job import check_before_loading

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(AMD)
    monkeypatch.setattr("paddle_r1.cpu_math.choose_mkl_kernels.__defaults__", (str(cpuinfo),))
    for tune in (False, True):
        monkeypatch.delenv("MKL_DEBUG_CPU_TYPE", raising=False)
        check_before_loading(GRPOConfig(model_name_or_path=tiny_model_dir, data_path=rec_jsonl, device="cpu",
                                        output_dir=str(tmp_path / "out"), tune_cpu_math=tune))
        assert os.environ.get("MKL_DEBUG_CPU_TYPE") == ("5" if tune else None)


def test_large_blocks_come_from_the_heap():
    """A 64 MB tensor: by default glibc maps it on its own (mmap, above 32 MiB), so that freeing it unmaps it and the
    next one starts on untouched pages; after ``keep_large_blocks_on_the_heap`` it is taken from the heap, where a freed
    block is reused. Read from glibc's own counters (``mallinfo2``: bytes in mmap-ed blocks, bytes of the heap). How
    many page faults that saves depends on what else the process allocates in between (MKL's buffers, other threads):
    ``python benchmarks/experiments/heap_blocks.py`` measures it."""
    import subprocess
    import sys

    code = ("import ctypes, sys, paddle\n"
            "class Info(ctypes.Structure):\n"
            "    _fields_ = [(n, ctypes.c_size_t) for n in 'arena ordblks smblks hblks hblkhd usmblks fsmblks "
            "uordblks fordblks keepcost'.split()]\n"
            "libc = ctypes.CDLL('libc.so.6'); libc.mallinfo2.restype = Info\n"
            "if sys.argv[1] == 'heap':\n"
            "    from paddle_r1.cpu_math import keep_large_blocks_on_the_heap; keep_large_blocks_on_the_heap()\n"
            "before = libc.mallinfo2(); x = paddle.ones([16 << 20]); after = libc.mallinfo2()\n"
            "print(after.hblkhd - before.hblkhd, after.arena - before.arena)\n")

    def grown(policy: str) -> tuple[int, int]:
        result = subprocess.run([sys.executable, "-c", code, policy], capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        mapped, heap = result.stdout.split()[-2:]
        return int(mapped), int(heap)

    block = 64 << 20
    mapped, heap = grown("mmap")
    assert mapped >= block and heap < block, (mapped, heap)
    mapped, heap = grown("heap")
    assert mapped < block and heap >= block - (1 << 20), (mapped, heap)
