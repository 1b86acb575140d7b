# Source: deep-image-matching 1.2.4 (PyPI sdist), its vendored DeDoDe: experiments/dedode_detector.py, the imports (lines
# 1-16) and of train() the settings, the model, the GradScaler and the loop (19-24, 66-70, 118-141),
# verbatim but for what is left out between them (the refiners, datasets and schedule); review 14.
import os

import torch
from torch.optim import AdamW
from torch.optim.lr_scheduler import CosineAnnealingLR
from torch.utils.data import ConcatDataset
import torch.nn as nn

from DeDoDe.train import train_k_steps
from DeDoDe.datasets.megadepth import MegadepthBuilder
from DeDoDe.detectors.keypoint_loss import KeyPointLoss
from DeDoDe.checkpoint import CheckPoint
from DeDoDe.detectors.dedode_detector import DeDoDeDetector
from DeDoDe.encoder import VGG19
from DeDoDe.decoder import Decoder, ConvRefiner
from DeDoDe.benchmarks import NumInliersBenchmark


def train():
    NUM_PROTOTYPES = 1
    residual = True
    hidden_blocks = 8
    amp_dtype = torch.float16
    amp = True

    experiment_name = os.path.splitext(os.path.basename(__file__))[0]
    encoder = VGG19(pretrained=True, amp=amp, amp_dtype=amp_dtype)
    decoder = Decoder(conv_refiner, num_prototypes=NUM_PROTOTYPES)
    model = DeDoDeDetector(encoder=encoder, decoder=decoder).cuda()
    grad_scaler = torch.cuda.amp.GradScaler()

    for n in range(n0, N, k):
        mega_sampler = torch.utils.data.WeightedRandomSampler(
            mega_ws, num_samples=8 * k, replacement=False
        )
        mega_dataloader = iter(
            torch.utils.data.DataLoader(
                megadepth_train,
                batch_size=8,
                sampler=mega_sampler,
                num_workers=8,
            )
        )
        train_k_steps(
            n,
            k,
            mega_dataloader,
            model,
            loss,
            optim,
            lr_scheduler,
            grad_scaler=grad_scaler,
        )
