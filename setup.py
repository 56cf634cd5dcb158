"""Packaging for fairseq-dense, a fairseq plugin of dense / deep NMT architectures."""

from setuptools import find_packages, setup

setup(
    name="fairseq-dense",
    version="0.1.0",
    description=(
        "fairseq plugin: DenseNMT, DenseRNN, Deep-Att/Deep-ED, an attentional GRU baseline and the Weighted Transformer"
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.9",  # torch >= 2.6 needs it
    packages=find_packages(include=["fairseq_dense", "fairseq_dense.*"]),
    # the quick-start's bundled corpus (xz) with its README and LICENSE (CC-BY 2.0 FR); MANIFEST.in
    # puts the same files in the sdist
    package_data={"fairseq_dense.data": ["tatoeba-deu-eng/*"]},
    install_requires=[
        # fairseq's main branch (Jan 2024), on every Python: fairseq 0.12.2 from PyPI cannot be imported
        # on Python >= 3.11 and lacks the hooks exact resume and the after-save checks use elsewhere
        # (the task's rebuild_batches switch, post_save).
        "fairseq-fixed==0.12.3.1",
        # Install torch first (the Makefile installs the CPU build 2.13.0): this
        # range is then already satisfied and pip never fetches a CUDA build.
        # >= 2.6: torch.load defaults to weights_only=True, so fairseq's own
        # checkpoint loading (which passes no weights_only) never unpickles code.
        "torch>=2.6",
        "sacrebleu>=2.0",
        "subword-nmt>=0.3.8",
        "sacremoses>=0.0.53",
        "numpy",
        "safetensors>=0.4",
        "huggingface_hub>=0.20",
    ],
    extras_require={
        "test": ["pytest>=7", "pytest-timeout", "pytest-xdist", "matplotlib", "ruff>=0.17,<0.18", "scipy"],
        "plot": ["matplotlib"],
    },
    entry_points={
        "console_scripts": [
            "fairseq-dense-quickstart = fairseq_dense.cli.quickstart:main",
            "fairseq-dense-synth = fairseq_dense.data.synthetic:main",
            "fairseq-dense-prepare = fairseq_dense.data.prepare:main",
            "fairseq-dense-export = fairseq_dense.cli.export:main",
            "fairseq-dense-push = fairseq_dense.cli.push:main",
            "fairseq-dense-plot = fairseq_dense.cli.plot:main",
            "fairseq-dense-train-ddp = fairseq_dense.cli.train_ddp:main",
            "fairseq-dense-interactive = fairseq_dense.cli.interactive:main",
            "fairseq-dense-branch-weights = fairseq_dense.cli.dump_branch_weights:main",
            "fairseq-dense-average = fairseq_dense.cli.average:main",
        ],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
