from torch import nn
from torch.cuda.amp import autocast, GradScaler

from starlight_vision.core.elucidated import ElucidatedStarlight


class StarlightTrainer(nn.Module):
    locked = False

    def __init__(
        self,
        starlight = None,
        fp16 = False,
        precision = None,
        **kwargs
    ):
        super().__init__()
        assert isinstance(starlight, (ElucidatedStarlight,))

        assert not (fp16 and exists(precision)), 'either set fp16 = True or forward the precision ("fp16", "bf16") to Accelerator'
        accelerator_mixed_precision = default(precision, 'fp16' if fp16 else 'no')

        # grad scaler must be managed outside of accelerator

        grad_scaler_enabled = fp16

        for ind, unet in enumerate(starlight.unets):

            scaler = GradScaler(enabled = grad_scaler_enabled)
