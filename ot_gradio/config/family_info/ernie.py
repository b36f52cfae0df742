"""ERNIE-Image (Baidu): a Mistral3 text encoder, Flux.2's VAE and a single-stream transformer;
LORA and FINE_TUNE of the transformer, as OneTrainer (models/ernie.py)."""

from ..enums import ModelType as M
from . import Sign, flow_transformer

FAMILIES = {
    M.ERNIE: flow_transformer(
        "ErnieImagePipeline", token_window=512, name="ERNIE-Image", hub_repo="baidu/ERNIE-Image", lora_version="ernie_image", comfy_model=False,
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
