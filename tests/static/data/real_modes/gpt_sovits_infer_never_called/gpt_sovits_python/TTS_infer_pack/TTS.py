import torch
from gpt_sovits_python.AR.models.t2s_lightning_module import Text2SemanticLightningModule


class TTS_Config:
    def __init__(self, configs):
        self.configs = configs
        self.is_half = self.configs.get("is_half", False)


class TTS:
    def __init__(self, configs):
        self.configs = TTS_Config(configs)
        self.t2s_model = None

    def init_t2s_weights(self, weights_path: str):
        dict_s1 = torch.load(weights_path, map_location=self.configs.device)
        config = dict_s1["config"]
        t2s_model = Text2SemanticLightningModule(config, "****", is_train=False)
        t2s_model.load_state_dict(dict_s1["weight"])
        t2s_model = t2s_model.to(self.configs.device)
        t2s_model = t2s_model.eval()
        self.t2s_model = t2s_model
        if self.configs.is_half and str(self.configs.device)!="cpu":
            self.t2s_model = self.t2s_model.half()

    def run(self, all_phoneme_ids, all_phoneme_lens, prompt, all_bert_features):
        pred_semantic_list, idx_list = self.t2s_model.model.infer_panel(
            all_phoneme_ids,
            all_phoneme_lens,
            prompt,
            all_bert_features,
        )
        return pred_semantic_list
