# Source: flagai 1.8.4 (PyPI sdist), flagai/auto_model/auto_loader.py: its imports (lines 5, 11) and, of
# AutoLoader.__init__, the signature (162-177) and the aquila2 branch's load (211-213, 275-279),
# verbatim but for what is left out between them (downloads, quantization, other models); review 13.
import os
import torch


class AutoLoader:

    def __init__(self,
                 task_name: str = "lm",
                 model_name: str = "RoBERTa-base-ch",
                 model_dir: str = "./checkpoints/",
                 only_download_config: bool = False,
                 device="cuda",
                 torch_dtype=torch.float16,
                 low_cpu_mem_usage=True,
                 lora_dir=None,
                 qlora_dir=None,
                 inference_mode=True,
                 model_max_length=None,
                 all_devices=False,
                 **kwargs):
        if task_name == "aquila2":
            from flagai.model.aquila2.modeling_aquila import AquilaForCausalLM
            download_path = os.path.join(model_dir, model_name)
            if inference_mode:

                model = AquilaForCausalLM.from_pretrained(download_path,low_cpu_mem_usage=low_cpu_mem_usage, torch_dtype=torch_dtype,
                                                        quantization_config=quantization_config)           
                model.eval()
