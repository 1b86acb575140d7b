from torch import nn

from starlight_vision.core.gen2 import (
    Unet,
)


class ElucidatedStarlight(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.unets = nn.ModuleList([Unet(dim)])
