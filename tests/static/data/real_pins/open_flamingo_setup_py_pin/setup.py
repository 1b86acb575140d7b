# Source: open-flamingo 2.0.1 (PyPI sdist), setup.py, lines 3-17 and 37-48 (verbatim; the README
# read, the descriptive fields and the extras left out).
from setuptools import find_packages, setup

if __name__ == "__main__":
    REQUIREMENTS = [
        "einops",
        "einops-exts",
        "transformers>=4.28.1",
        "torch==2.0.1",
        "pillow",
        "open_clip_torch>=2.16.0",
        "sentencepiece==0.1.98",
    ]

    setup(
        name="open_flamingo",
        packages=find_packages(),
        include_package_data=True,
        version="2.0.1",
        install_requires=REQUIREMENTS,
    )
