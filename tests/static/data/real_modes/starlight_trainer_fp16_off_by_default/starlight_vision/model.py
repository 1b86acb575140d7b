from starlight_vision.core.elucidated import ElucidatedStarlight
from starlight_vision.trainer import StarlightTrainer


class Starlight:
    def __init__(self, dim=64):
        # Initialize the Starlight model
        self.starlight = ElucidatedStarlight(dim=dim).cuda()

        # Initialize the trainer
        self.trainer = StarlightTrainer(self.starlight)
