# Source: nnunet 1.7.1 (PyPI sdist), nnunet/network_architecture/generic_modular_preact_residual_UNet.py,
# lines 15-29 and 492-549 (the training loop of its `__main__` block, shortened: the U-Net replaced by
# a stand-in convolution, its printing left out).
import torch
from torch.cuda.amp import GradScaler, autocast
from nnunet.training.loss_functions.dice_loss import DC_and_CE_loss
from torch import nn
from torch.optim import SGD

if __name__ == "__main__":
    patch_size = (128, 128, 128)
    input_modalities = 4
    num_classes = 5
    batch_size = 2

    unet = nn.Conv3d(input_modalities, num_classes, 3, padding=1).cuda()

    scaler = GradScaler()
    optimizer = SGD(unet.parameters(), lr=0.1, momentum=0.95)

    loss = DC_and_CE_loss({'batch_dice': True, 'smooth': 1e-5, 'do_bg': False}, {})

    dummy_input = torch.rand((batch_size, input_modalities, *patch_size)).cuda()
    dummy_gt = (torch.rand((batch_size, 1, *patch_size)) * num_classes).round().clamp_(0, num_classes-1).cuda().long()

    for i in range(10):
        optimizer.zero_grad()

        with autocast():
            output = unet(dummy_input)

            l = loss(output, dummy_gt)
            scaler.scale(l).backward()
            scaler.step(optimizer)
            scaler.update()
