# Source: deep-image-matching 1.2.4 (PyPI sdist), its vendored DeDoDe: DeDoDe/benchmarks/__init__.py
# reduced to the one benchmark the experiment imports.
from .num_inliers import NumInliersBenchmark
