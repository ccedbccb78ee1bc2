import os

from setuptools import find_packages, setup

# GPU users install paddlepaddle-gpu themselves and set PADDLE_R1_GPU=1 so that pip does not add the
# CPU wheel next to it (the two are different distributions of the same `paddle` package).
PADDLE = [] if os.environ.get("PADDLE_R1_GPU") == "1" else ["paddlepaddle>=3.3.1"]

# report_to's trackers beyond VisualDL (paddleformers requires visualdl): pip install 'paddle_r1[swanlab]'
TRACKERS = {"swanlab": ["swanlab"], "wandb": ["wandb"]}

setup(
    name="paddle_r1",
    version="0.1.0",
    description="GRPO reinforcement fine-tuning of Qwen2-VL / Qwen2.5-VL on PaddlePaddle",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["paddle_r1", "paddle_r1.*"]),
    python_requires=">=3.10",
    install_requires=PADDLE + [
        "paddleformers==1.2.0",
        "av",  # PyAV: reads video clips; its wheels bundle FFmpeg (paddle_r1/data/video.py)
        "math-verify[antlr4_13_2]",
        "matplotlib",  # paddle-r1 plot (visualdl pulls it in too, but plot.py imports it itself)
        "nltk",
        "openpyxl",  # pandas' reader for .xlsx product tables (seed 002)
        "pandas",
        "pycocotools",
        # paddleformers pins numpy<=1.26.4 (via fast_dataindex); pyarrow 26 needs numpy 2, and `datasets` needs pyarrow
        "pyarrow>=24,<26",
        "scipy",
        # paddleformers' fast_dataindex needs numpy<=1.26.4. Said here, pip 23.2 (what a fresh Python 3.11 venv
        # brings) takes numpy 1.26.4 first; said only there, it takes numpy 2 first and backtracks through every
        # version of datasets, contourpy and visualdl before it gets to numpy (killed after 10 min: docs/reference.md,
        # Install)
        "numpy<=1.26.4",
        "pillow",
        "pyyaml",
        "rapidfuzz",  # the OCR rewards' edit distance (paddle_r1/rewards/families/ocr.py)
        "rouge-score",  # Google's ROUGE, which Video-R1's free-form reward uses (rewards/families/video_r1.py)
        "safetensors",
        "table-recognition-metric",  # TEDS (apted, lxml) for the table reward
        "tokenizers",
        "tqdm",
        "visualdl",
    ],
    # pytest-xdist: the suite runs on two workers (README "Test"); openai: the serve test's client; nbclient,
    # nbformat, ipykernel: tests/test_notebooks.py runs notebooks/ in a kernel of the test environment; hypothesis:
    # the command-line fuzz (tests/test_command_line_fuzz.py); swanlab, wandb: the trackers of config key report_to
    # beside VisualDL (paddle_r1/telemetry/trackers.py), which tests/test_trackers.py runs in their offline modes;
    # ruff: the lint rules of ruff.toml, run before the tests
    extras_require={"test": ["pytest>=7", "pytest-timeout", "pytest-xdist", "ruff>=0.15", "openai>=1.0", "nbclient",
                             "nbformat", "ipykernel", "hypothesis", *TRACKERS["swanlab"], *TRACKERS["wandb"],
                             "triton>=3"],
                    **TRACKERS, "paddleocr_vl": ["triton>=3"]},  # paddleformers' paddleocr_vl imports triton
    entry_points={"console_scripts": ["paddle-r1=paddle_r1.cli:main"]},
)
