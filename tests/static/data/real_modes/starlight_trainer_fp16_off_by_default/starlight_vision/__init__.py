from starlight_vision.model import Starlight
