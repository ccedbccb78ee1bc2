"""Which MKL kernels paddle_r1 asks for, from /proc/cpuinfo's text (no timing here: benchmarks/grpo_step.py)."""
from paddle_r1.cpu_math import mkl_cpu_type

AMD = "vendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse sse2 fma avx avx2\n"


def test_amd_with_avx2_and_fma_gets_mkls_avx2_kernels():
    assert mkl_cpu_type(AMD + "\n" + AMD) == "5"


def test_intel_and_processors_without_avx2_are_left_to_mkl():
    assert mkl_cpu_type(AMD.replace("AuthenticAMD", "GenuineIntel")) is None
    assert mkl_cpu_type(AMD.replace(" avx2", "")) is None
    assert mkl_cpu_type(AMD.replace(" fma", "")) is None
    assert mkl_cpu_type("") is None
