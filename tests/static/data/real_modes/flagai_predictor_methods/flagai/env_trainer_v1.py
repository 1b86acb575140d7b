# Source: flagai 1.8.4 (PyPI sdist), flagai/env_trainer_v1.py: of class EnvTrainer, pre_train
# (lines 307-326, its checkpoint loading and a warning left out) and the end of evaluate (1063-1065,
# 1166-1179, its evaluation loop and logging left out), verbatim but for those; review 13.
class EnvTrainer():
    def pre_train(self, model=None, find_unused_parameters=True):
        # TODO
        self.model = model

        # Turn on training mode which enables dropout.
        self.model.train()

        # TODO
        if self.fp16 and not self.already_fp16:
            self.model.half()

    def evaluate(self,
                 data_loader=None,
                 model=None):
        # TODO
        if self.tokenizer is not None:
            test_data = [
                "Hollym Gate railway station",
                "In mathematics, the Haagerup property"
            ]
            from flagai.model.predictor.predictor import Predictor
            predictor = Predictor(model, self.tokenizer)
            for text in test_data:
                output_text = predictor.predict_generate_beamsearch(
                    text,
                    out_max_length=128,
                    beam_size=3)
