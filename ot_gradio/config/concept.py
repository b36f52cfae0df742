"""A concept: one folder of training images with how to caption and augment them."""

from __future__ import annotations

from .conditions import EDITS_IMAGES, TAKES_VIDEO
from .enums import BalancingStrategy, ConceptType, PromptSource
from .fields import Section, opt


class ConceptImageConfig(Section):
    enable_crop_jitter: bool = opt(True, "Crop jitter", "When an image is larger than its bucket, crop a random window each epoch instead of the centre.")
    enable_random_flip: bool = opt(False, "Random flip", "Mirror the image horizontally at random (50%) each epoch. Avoid for asymmetric subjects, text or logos.")
    enable_fixed_flip: bool = opt(False, "Always flip", "Mirror every image horizontally.")
    enable_random_rotate: bool = opt(False, "Random rotation", "Rotate image and mask by a random angle between -max and +max each epoch (with latent caching: per image variation). Corners that come into view are black and masked out.")
    enable_fixed_rotate: bool = opt(False, "Fixed rotation", "Always rotate by the maximum angle (random rotation wins when both are on).")
    random_rotate_max_angle: float = opt(0.0, "Max rotation angle", "Largest rotation in degrees, counter-clockwise for the fixed rotation.", ge=0, le=180)
    enable_random_brightness: bool = opt(False, "Random brightness", "Multiply brightness by a random factor between 1 - max and 1 + max each epoch (with latent caching: per image variation).")
    enable_fixed_brightness: bool = opt(False, "Fixed brightness", "Always multiply brightness by 1 + max (random wins when both are on).")
    random_brightness_max_strength: float = opt(0.0, "Max brightness strength", "0 = no change; 1 = from black up to twice as bright.", ge=0, le=1)
    enable_random_contrast: bool = opt(False, "Random contrast", "Scale contrast by a random factor between 1 - max and 1 + max each epoch (with latent caching: per image variation).")
    enable_fixed_contrast: bool = opt(False, "Fixed contrast", "Always scale contrast by 1 + max (random wins when both are on).")
    random_contrast_max_strength: float = opt(0.0, "Max contrast strength", "0 = no change; 1 = from flat grey up to twice the contrast.", ge=0, le=1)
    enable_random_saturation: bool = opt(False, "Random saturation", "Scale saturation by a random factor between 1 - max and 1 + max each epoch (with latent caching: per image variation).")
    enable_fixed_saturation: bool = opt(False, "Fixed saturation", "Always scale saturation by 1 + max (random wins when both are on).")
    random_saturation_max_strength: float = opt(0.0, "Max saturation strength", "0 = no change; 1 = from greyscale up to twice as saturated.", ge=0, le=1)
    enable_random_hue: bool = opt(False, "Random hue", "Shift hue by a random amount up to max/2 turns of the colour wheel either way each epoch (with latent caching: per image variation).")
    enable_fixed_hue: bool = opt(False, "Fixed hue", "Always shift hue by max/2 turns of the colour wheel (random wins when both are on).")
    random_hue_max_strength: float = opt(0.0, "Max hue strength", "0 = no change; 1 = shifts of up to half the colour wheel either way (as OneTrainer: the shift is max/2).", ge=0, le=1)
    enable_resolution_override: bool = opt(False, "Resolution override", "Train this concept at its own resolution instead of the global one.")
    resolution_override: str = opt("512", "Override resolution", "Resolution for this concept, e.g. 512, a list 384,448,512, or 768x512: every image of the concept at that one size (width x height), as in OneTrainer.")
    control_folder: str = opt("", "Control image folder", "Image-editing models (Qwen-Image-Edit): the folder of the source images, each named as its edited image (any image extension; in the same subfolder), as ai-toolkit's control_path and musubi-tuner's control_directory keep them. Blank = each image's <name>-control image beside it. Keep it outside the concept's folder. Other model types do not read it.", applies_when=EDITS_IMAGES)
    clip_spread: bool = opt(False, "Spread frames over the clip", "Video models: each clip of this concept trains Frames frames spread evenly from Clip start to its last frame, so a long clip is seen whole at a lower frame rate (a shorter one keeps the frames it has), as ai-toolkit's shrink_video_to_frames (its default) takes them: frame round(i x (n - 1) / (Frames - 1)) of its n. The clip is decoded through its last frame, slower to read without latent caching. Off: frames at the Clip frame rate, from a window (Random clip window).", applies_when=TAKES_VIDEO)
    media: str = opt("ALL", "Files trained", "Video models: which of the concept folder's files train. ALL = its images and clips; IMAGES = its images only (a clip in the folder is left out, as musubi-tuner's image_directory and ai-toolkit's one-frame datasets read a folder); CLIPS = its clips only (a thumbnail or still beside them is left out, as musubi-tuner's video_directory reads one). What is left out is counted in the dataset report. Image models read images only.", choices=["ALL", "IMAGES", "CLIPS"], applies_when=TAKES_VIDEO)
    alpha_mask: bool = opt(False, "Alpha as mask", "Masked training: an image with transparent pixels and no -masklabel file is masked by its own alpha channel (opaque = trained, transparent = ignored), as kohya's alpha_mask; its transparent pixels are white underneath. Off: such an image trains whole, on white.")
    enable_random_circular_mask_shrink: bool = opt(False, "Random circular mask shrink", "Masked training: keep only a random disc of each mask (centre inside the mask, radius 0.2-1 x its furthest reach) each epoch (with latent caching: per image variation).")
    enable_random_mask_rotate_crop: bool = opt(False, "Random mask rotate and crop", "Masked training: turn image and mask by up to 20 degrees about the mask and cut them to the mask's box plus 10-30% padding (at least the smallest resolution) each epoch (with latent caching: per image variation), so the masked area fills the sample.")


class ConceptTextConfig(Section):
    prompt_source: PromptSource = opt(PromptSource.SAMPLE, "Prompt source", "Where captions come from: 'sample' = a .txt next to each image (else kohya's .caption, else the folder's captions.json or metadata.jsonl / .csv; or the concept's Captions file; each non-empty line is one caption, one is picked at random per epoch); 'concept' = one text file for the whole concept; 'filename' = the image's file name.")
    filename_spaces: bool = opt(False, "Underscores as spaces", "With prompt source 'filename': the file name's underscores are read as spaces (a_red_fox.png is 'a red fox'), as SimpleTuner reads its filename captions. Off: the name as written (OneTrainer).")
    prompt_path: str = opt("", "Prompt file", "With prompt source 'concept': the text file whose lines are the captions for every image of this concept.")
    caption_prefix: str = opt("", "Caption prefix", "Put before every caption of this concept, with a space (write the delimiter yourself: 'ohwx,'), before the tags are shuffled or dropped, so a trigger word joins every caption without editing the files and Keep tags counts it; as kohya's caption_prefix.")
    trigger_word: str = opt("", "Trigger word", "Replaces [trigger] in this concept's captions, and starts (with a space) each caption that does not hold it; then the caption prefix is added and the tags shuffled or dropped. As ai-toolkit's trigger_word, whose captions often say [trigger]. Blank = captions as written.")
    caption_suffix: str = opt("", "Caption suffix", "Put after every caption of this concept, with a space (', masterpiece'), before the tags are shuffled or dropped; as kohya's caption_suffix.")
    caption_lines: str = opt("EACH", "Caption file lines", "With prompt source 'sample', a caption file of several lines is: EACH = one caption a line, one drawn per epoch (OneTrainer, SimpleTuner); FIRST = its first line only, even a blank one (kohya's sd-scripts without wildcards); WHOLE = the whole file one caption, its line breaks kept (diffusion-pipe, musubi-tuner, ai-toolkit).", choices=["EACH", "FIRST", "WHOLE"])
    captions_file: str = opt("", "Captions file", "With prompt source 'sample': one file holding this concept's captions, in place of caption files and the folder's captions.json / metadata files: kohya's fine-tuning metadata (meta_cap.json, meta_lat.json or .jsonl; its caption then its tags, joined by the tag delimiter, as sd-scripts), diffusion-pipe's captions.json or Hugging Face's metadata.jsonl / .csv. Only the images it names train (as in kohya's fine-tuning; the others are counted), with its captions. kohya's and musubi-tuner's names are from the concept folder (a name without its extension matches any image of that name) or whole paths inside it (a whole path elsewhere, as in metadata made on another machine, matches by its file name); a captions.json's or metadata file's are from its own folder when it is inside the concept folder. Blank = caption files, then the captions.json / metadata files found in the folder.")
    default_caption: str = opt("", "Caption without a file", "With prompt source 'sample': the caption of an image that has no caption file (.txt, .caption), as kohya's class tokens are (its '40_ohwx woman' folder captions such images 'ohwx woman'). An empty caption file stays empty. Blank = such images train with an empty caption.")
    enable_tag_shuffling: bool = opt(False, "Tag shuffling", "Shuffle the tags (split on the tag delimiter) each epoch, keeping the first 'keep tags' in place.")
    tag_delimiter: str = opt(",", "Tag delimiter", "What separates tags in a caption.")
    keep_tags_count: int = opt(1, "Keep tags", "How many leading tags are never shuffled, dropped or re-cased (e.g. the trigger word). In a caption holding kohya's `|||`, what comes before it is kept instead.", ge=0)
    tag_dropout_enable: bool = opt(False, "Tag dropout", "Drop tags at random each epoch so the model does not rely on any single one. The first 'keep tags' tags are never dropped.")
    tag_dropout_mode: str = opt("FULL", "Tag dropout mode", "FULL: with the probability, drop all droppable tags at once. RANDOM: drop each tag with the probability. RANDOM WEIGHTED: like RANDOM, but later tags drop more often (the last one with the full probability).", choices=["FULL", "RANDOM", "RANDOM WEIGHTED"])
    tag_dropout_probability: float = opt(0.0, "Tag dropout probability", "Chance to drop (per caption for FULL, per tag otherwise).", ge=0, le=1)
    tag_dropout_special_tags_mode: str = opt("NONE", "Special tags mode", "NONE: every tag can drop. BLACKLIST: only the special tags can drop. WHITELIST: the special tags never drop.", choices=["NONE", "BLACKLIST", "WHITELIST"])
    tag_dropout_special_tags: str = opt("", "Special tags", "Tags separated by the tag delimiter, or a path to a .txt (one tag a line) or .csv (first column) file, absolute or inside the concept folder.")
    tag_dropout_special_tags_regex: bool = opt(False, "Special tags are regex", "Treat the special tags as regular expressions that must match a whole tag.")
    caps_randomize_enable: bool = opt(False, "Randomize capitalisation", "Change the letter case of tags at random each epoch. The first 'keep tags' tags keep their case.")
    caps_randomize_mode: str = opt("capslock, title, first, random", "Capitalisation modes", "Comma-separated case changes to pick from at random: capslock (ALL CAPS), title (Every Word), first (First word), random (rAnDoM letters).")
    caps_randomize_probability: float = opt(0.0, "Capitalisation probability", "Chance to change each tag's case.", ge=0, le=1)
    caps_randomize_lowercase: bool = opt(False, "Force lowercase", "Lowercase every tag but the first 'keep tags' before any case randomisation (also when randomisation is off, as in OneTrainer).")


class ConceptConfig(Section):
    name: str = opt("", "Name", "A name for this concept, shown in the list and the statistics.")
    path: str = opt("", "Folder", "Folder with the training images (png, jpg, jpeg, webp, bmp, tif, tiff, avif, heic, heif; for a video model also clips: mp4, webm, mov, mkv, avi, m4v, mpeg, flv, wmv). Files ending in -masklabel.png are masks, .txt files (or kohya's .caption) captions; for QWEN_IMAGE_EDIT <name>-control images and for STABLE_DIFFUSION_20_DEPTH <name>-depth maps go with their images, <name>-condlabel images are inpainting conditioning images (Custom conditioning image); everything else is ignored.")
    enabled: bool = opt(True, "Enabled", "Disabled concepts are kept in the config but not trained.")
    seed: int = opt(0, "Seed", "Seed for this concept's random choices. With latent caching it alone draws the cached variations (crops, rotations, colours), so a new run seed reuses the cache.")
    type: ConceptType = opt(ConceptType.STANDARD, "Type", "STANDARD trains on the images. VALIDATION holds them out: never trained, their loss is computed when Validation is on (General tab). PRIOR_PREDICTION (LoRA only) trains on the images with the base model's own prediction (the LoRA turned off) as the target instead of the image: regularisation, so the LoRA keeps what the model drew for these captions while it learns the other concepts.")
    include_subdirectories: bool = opt(False, "Include subfolders", "Also take images from subfolders of the concept folder.")
    image_variations: int = opt(1, "Image variations", "With latent caching: how many augmented versions (crop jitter, rotation, colour) of each image to encode; each showing of an image uses the next one, cycling through all (one per epoch; with Balancing 2, two different ones an epoch, as OneTrainer). More gives variety at the cost of caching time and disk. Without caching every epoch is augmented afresh.", ge=1)
    text_variations: int = opt(1, "Text variations", "With random tag shuffling, dropout or capitalisation: 1 draws each caption afresh every epoch (not cached); N > 1 makes it one of N fixed draws per image, the next at each showing, whose text encoder outputs are cached (as OneTrainer).", ge=1)
    balancing: float = opt(1.0, "Balancing", "REPEATS: how many times each image is shown per epoch: an epoch has images × Balancing samples, rounded down as in OneTrainer (0.5 = half of the images, the other half the next epoch). SAMPLES: how many images of this concept an epoch has (the whole part). Images beyond whole repeats are taken in turn, continuing across epochs, so over the epochs each is shown equally often. A concept rounded down to 0 samples (1 image at 0.5) is never trained; its warning says so. A kohya folder named `40_ohwx woman` is REPEATS 40 here.", gt=0)
    balancing_strategy: BalancingStrategy = opt(BalancingStrategy.REPEATS, "Balancing strategy", "REPEATS multiplies the image count (rounded down); SAMPLES sets it.")
    loss_weight: float = opt(1.0, "Loss weight", "Multiplies this concept's loss; raise it to make a small concept count more.", ge=0)
    concept_stats: dict = opt(default_factory=dict, label="Statistics", tooltip="Statistics OneTrainer stores with a concept; kept as they are, not used for training.")

    image: ConceptImageConfig = opt(default_factory=ConceptImageConfig, label="Image augmentation", tooltip="Image augmentation settings.")
    text: ConceptTextConfig = opt(default_factory=ConceptTextConfig, label="Text augmentation", tooltip="Caption settings.")
