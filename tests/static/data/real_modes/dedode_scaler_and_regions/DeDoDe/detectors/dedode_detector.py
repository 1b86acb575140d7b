# Source: deep-image-matching 1.2.4 (PyPI sdist), its vendored DeDoDe: DeDoDe/detectors/dedode_detector.py, the imports (lines
# 1-13) and DeDoDeDetector's __init__, forward and detect (16-77), verbatim; review 14.
import torch
from PIL import Image
import torch.nn as nn
import torchvision.models as tvm
import torch.nn.functional as F
import numpy as np

from ...DeDoDe.utils import (
    sample_keypoints,
    to_pixel_coords,
    to_normalized_coords,
    get_best_device,
)


class DeDoDeDetector(nn.Module):
    def __init__(self, encoder, decoder, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.encoder = encoder
        self.decoder = decoder
        import torchvision.transforms as transforms

        self.normalizer = transforms.Normalize(
            mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]
        )

    def forward(
        self,
        batch,
    ):
        if "im_A" in batch:
            images = torch.cat((batch["im_A"], batch["im_B"]))
        else:
            images = batch["image"]
        features, sizes = self.encoder(images)
        logits = 0
        context = None
        scales = ["8", "4", "2", "1"]
        for idx, (feature_map, scale) in enumerate(zip(reversed(features), scales)):
            delta_logits, context = self.decoder(
                feature_map, context=context, scale=scale
            )
            logits = (
                logits + delta_logits.float()
            )  # ensure float (need bf16 doesnt have f.interpolate)
            if idx < len(scales) - 1:
                size = sizes[-(idx + 2)]
                logits = F.interpolate(
                    logits, size=size, mode="bicubic", align_corners=False
                )
                context = F.interpolate(
                    context.float(), size=size, mode="bilinear", align_corners=False
                )
        return {"keypoint_logits": logits.float()}

    @torch.inference_mode()
    def detect(self, batch, num_keypoints=10_000):
        self.train(False)
        keypoint_logits = self.forward(batch)["keypoint_logits"]
        B, K, H, W = keypoint_logits.shape
        keypoint_p = (
            keypoint_logits.reshape(B, K * H * W)
            .softmax(dim=-1)
            .reshape(B, K, H * W)
            .sum(dim=1)
        )
        keypoints, confidence = sample_keypoints(
            keypoint_p.reshape(B, H, W),
            use_nms=False,
            sample_topk=True,
            num_samples=num_keypoints,
            return_scoremap=True,
            sharpen=False,
            upsample=False,
            increase_coverage=True,
        )
        return {"keypoints": keypoints, "confidence": confidence}
