# Source: flagai 1.8.4 (PyPI sdist), flagai/model/predictor/predictor.py: the imports it needs, and
# of class Predictor the end of __init__ (lines 78-80), predict_generate_beamsearch (219-232, its
# first branch), predict_generate_randomsample (301-336, its GPT branch) and the sampling loop of
# predict_generate_images (362-363, 436-461, its setup and saving left out), verbatim but for the
# branches of other model families; review 13.
import torch
from flagai.model.predictor.utils import glm_beamsearch
from flagai.model.predictor.gpt import gpt_random_sample_use_cache
from torch.cuda.amp import autocast as autocast


class Predictor:
    def __init__(self, model, tokenizer=None):
        self.tokenizer = tokenizer
        self.model = model
        self.model.eval()
        self.class_name = type(model).__name__

    def predict_generate_beamsearch(self,
                                    text: str,
                                    input_max_length: int = 256,
                                    out_max_length: int = 100,
                                    beam_size: int = 1) -> str:
        self.model.eval()
        if "glm" in self.class_name.lower():
            #assert "seq2seq" in self.class_name.lower(), "this function only support seq2seq task"
            return glm_beamsearch(self.model, self.tokenizer, text,
                                  out_max_length, beam_size)

    def predict_generate_randomsample(self,
                                      text: str,
                                      input_max_length: int = 256,
                                      out_max_length: int = 200,
                                      top_k: int = 30,
                                      top_p: float = 1.0,
                                      repetition_penalty: float = 1.0,
                                      temperature: float = 1.0,
                                      prompts_tokens=None):
        device = next(self.model.parameters()).device
        if "gpt" in self.class_name.lower(
        ) or "opt" in self.class_name.lower() \
            or "galactica" in self.class_name.lower():
            return gpt_random_sample_use_cache(self.model, self.tokenizer,
                                               text, input_max_length,
                                               out_max_length, top_k, top_p,
                                               repetition_penalty, temperature,
                                               device)

    def predict_generate_images(self,
                                prompt: str):
        with torch.no_grad():
            with self.model.ema_scope():
                all_samples = list()
                for prompts in [prompt]:
                    c = self.model.get_learned_conditioning(prompts)
                    samples_ddim = c
                    with autocast():
                        x_samples_ddim = self.model.decode_first_stage(
                            samples_ddim)
                    x_samples_ddim = torch.clamp(
                        (x_samples_ddim + 1.0) / 2.0, min=0.0, max=1.0)
                    all_samples.append(x_samples_ddim)
        return all_samples
