"""ERNIE-Image (Baidu): a Mistral3 text encoder, Flux.2's VAE and a single-stream transformer;
LORA and FINE_TUNE of the transformer, as OneTrainer (models/ernie.py)."""

from ..enums import ModelType as M
from ..enums import TrainingMethod as T
from . import FamilyInfo, Sign

FAMILIES = {
    M.ERNIE: FamilyInfo(
        ("transformer", "text_encoder", "vae"), "transformer", ("text_encoder",), methods=(T.LORA, T.FINE_TUNE),
        implemented=True, transformer_file=True, gguf=True, bucket_step=16, schedule="flow_matching", diffusers_lora=("ErnieImagePipeline", ()),
        # ComfyUI (its October 2025 source) has no ERNIE-Image model, so no key map: a kohya-layout file is refused
        lora_unread=(("kohya", "transformer", "ComfyUI has no ERNIE-Image model to map its names to and diffusers reads "
                      "no kohya ERNIE-Image file (ErnieImagePipeline.load_lora_weights reads DIFFUSERS_LORA)"),),
        text_encoder_labels=("Mistral3",), preset="ernie-lora", preset_note="FLOAT_8 transformer and text encoder",
        # baidu/ERNIE-Image, counted on the meta device: its transformer/config.json (36 layers of
        # 4096, 32 heads, 12288 wide MLP, text width 3072); the text encoder, Ministral 3B's
        # Mistral3Model (26 text layers of 3072, 32 x 128 heads, 8 KV heads, 9216 wide MLP, 131,072
        # tokens: 3.43 B) with a default Pixtral vision tower and projector (the repo's vision config
        # was not at hand); the VAE is Flux.2's AutoencoderKLFlux2
        params={"transformer": 8_033_490_048, "text_encoder": 3_849_274_368, "vae": 84_046_115},
    ),
}
SIGN = Sign("ERNIE-Image", (M.ERNIE,), ("ErnieImage",), ("ernie-image", "ernie_image", "ernie"))
