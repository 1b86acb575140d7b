# Source: deep-image-matching 1.2.4 (PyPI sdist), its vendored DeDoDe: DeDoDe/benchmarks/num_inliers.py,
# the imports (lines 1-4) and NumInliersBenchmark.benchmark's loop head (7, 90-97), verbatim but for
# the constructor and the metrics left out; the benchmark is what calls the detector's `detect`.
import torch
import torch.nn as nn
from DeDoDe.utils import *
import DeDoDe


class NumInliersBenchmark(nn.Module):
    def benchmark(self, detector):
        self.tracked_metrics = {}
        from tqdm import tqdm

        print("Evaluating percent inliers...")
        for idx, batch in tqdm(enumerate(self.dataloader), mininterval=10.0):
            batch = to_best_device(batch)
            outputs = detector.detect(batch, num_keypoints=self.num_keypoints)
