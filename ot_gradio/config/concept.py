"""A concept: one folder of training images with how to caption and augment them."""

from __future__ import annotations

from .enums import BalancingStrategy, ConceptType, PromptSource
from .fields import PLANNED, Section, opt


class ConceptImageConfig(Section):
    enable_crop_jitter: bool = opt(True, "Crop jitter", "When an image is larger than its bucket, crop a random window each epoch instead of the centre.")
    enable_random_flip: bool = opt(False, "Random flip", "Mirror the image horizontally at random (50%) each epoch. Avoid for asymmetric subjects, text or logos.")
    enable_fixed_flip: bool = opt(False, "Always flip", "Mirror every image horizontally.")
    enable_random_rotate: bool = opt(False, "Random rotation", "Rotate by a random angle up to the maximum each epoch.", status=PLANNED)
    enable_fixed_rotate: bool = opt(False, "Fixed rotation", "Always rotate by the maximum angle.", status=PLANNED)
    random_rotate_max_angle: float = opt(0.0, "Max rotation angle", "Largest rotation in degrees.", ge=0, le=180, status=PLANNED)
    enable_random_brightness: bool = opt(False, "Random brightness", "Vary brightness at random up to the maximum strength.", status=PLANNED)
    enable_fixed_brightness: bool = opt(False, "Fixed brightness", "Always change brightness by the maximum strength.", status=PLANNED)
    random_brightness_max_strength: float = opt(0.0, "Max brightness strength", "0 = no change, 1 = up to fully dark or bright.", ge=0, le=1, status=PLANNED)
    enable_random_contrast: bool = opt(False, "Random contrast", "Vary contrast at random up to the maximum strength.", status=PLANNED)
    enable_fixed_contrast: bool = opt(False, "Fixed contrast", "Always change contrast by the maximum strength.", status=PLANNED)
    random_contrast_max_strength: float = opt(0.0, "Max contrast strength", "0 = no change.", ge=0, le=1, status=PLANNED)
    enable_random_saturation: bool = opt(False, "Random saturation", "Vary saturation at random up to the maximum strength.", status=PLANNED)
    enable_fixed_saturation: bool = opt(False, "Fixed saturation", "Always change saturation by the maximum strength.", status=PLANNED)
    random_saturation_max_strength: float = opt(0.0, "Max saturation strength", "0 = no change.", ge=0, le=1, status=PLANNED)
    enable_random_hue: bool = opt(False, "Random hue", "Shift hue at random up to the maximum strength.", status=PLANNED)
    enable_fixed_hue: bool = opt(False, "Fixed hue", "Always shift hue by the maximum strength.", status=PLANNED)
    random_hue_max_strength: float = opt(0.0, "Max hue strength", "0 = no change, 0.5 = half the colour wheel.", ge=0, le=0.5, status=PLANNED)
    enable_resolution_override: bool = opt(False, "Resolution override", "Train this concept at its own resolution instead of the global one.")
    resolution_override: str = opt("512", "Override resolution", "Resolution for this concept, e.g. 512, 768x512 or a list 384,448,512.")
    enable_random_circular_mask_shrink: bool = opt(False, "Random circular mask shrink", "Masked training: shrink the mask towards a random circle.", status=PLANNED)
    enable_random_mask_rotate_crop: bool = opt(False, "Random mask rotate and crop", "Masked training: rotate and crop around the mask.", status=PLANNED)


class ConceptTextConfig(Section):
    prompt_source: PromptSource = opt(PromptSource.SAMPLE, "Prompt source", "Where captions come from: 'sample' = a .txt next to each image (each non-empty line is one caption, one is picked at random per epoch); 'concept' = one text file for the whole concept; 'filename' = the image's file name.")
    prompt_path: str = opt("", "Prompt file", "With prompt source 'concept': the text file whose lines are the captions for every image of this concept.")
    enable_tag_shuffling: bool = opt(False, "Tag shuffling", "Shuffle comma-separated tags each epoch, keeping the first N in place.")
    tag_delimiter: str = opt(",", "Tag delimiter", "What separates tags in a caption.")
    keep_tags_count: int = opt(1, "Keep tags", "How many leading tags are never shuffled or dropped (e.g. the trigger word).", ge=0)
    tag_dropout_enable: bool = opt(False, "Tag dropout", "Drop tags at random so the model does not rely on any single one.", status=PLANNED)
    tag_dropout_mode: str = opt("FULL", "Tag dropout mode", "FULL drops each tag with the probability; RANDOM drops a random share; RANDOM WEIGHTED favours the end.", status=PLANNED)
    tag_dropout_probability: float = opt(0.0, "Tag dropout probability", "Chance to drop a tag.", ge=0, le=1, status=PLANNED)
    tag_dropout_special_tags_mode: str = opt("NONE", "Special tags mode", "NONE, BLACKLIST (only these can drop) or WHITELIST (these never drop).", status=PLANNED)
    tag_dropout_special_tags: str = opt("", "Special tags", "Comma-separated tags (or a path to a .txt/.csv) for the special tags mode.", status=PLANNED)
    tag_dropout_special_tags_regex: bool = opt(False, "Special tags are regex", "Treat the special tags as regular expressions.", status=PLANNED)
    caps_randomize_enable: bool = opt(False, "Randomize capitalisation", "Change letter case of tags at random.", status=PLANNED)
    caps_randomize_mode: str = opt("capslock, title, first, random", "Capitalisation modes", "Which case changes to pick from.", status=PLANNED)
    caps_randomize_probability: float = opt(0.0, "Capitalisation probability", "Chance to change a tag's case.", ge=0, le=1, status=PLANNED)
    caps_randomize_lowercase: bool = opt(False, "Lowercase first", "Lowercase captions before randomizing case.", status=PLANNED)


class ConceptConfig(Section):
    name: str = opt("", "Name", "A name for this concept, shown in the list and the statistics.")
    path: str = opt("", "Folder", "Folder with the training images (png, jpg, jpeg, webp, bmp). Files ending in -masklabel.png are masks, .txt files captions; everything else is ignored.")
    enabled: bool = opt(True, "Enabled", "Disabled concepts are kept in the config but not trained.")
    seed: int = opt(0, "Seed", "Seed for this concept's random choices (captions, crops, flips).")
    type: ConceptType = opt(ConceptType.STANDARD, "Type", "STANDARD trains on the images. VALIDATION and PRIOR_PREDICTION are not supported yet.")
    include_subdirectories: bool = opt(False, "Include subfolders", "Also take images from subfolders of the concept folder.")
    image_variations: int = opt(1, "Image variations", "How many augmented versions of each image to cache; more gives variety with latent caching on.", ge=1, status=PLANNED)
    text_variations: int = opt(1, "Text variations", "How many text variations to cache per image when the text encoder output is cached.", ge=1, status=PLANNED)
    balancing: float = opt(1.0, "Balancing", "REPEATS: how many times each image is shown per epoch (0.5 = half of the images each epoch). SAMPLES: how many images of this concept an epoch has.", gt=0)
    balancing_strategy: BalancingStrategy = opt(BalancingStrategy.REPEATS, "Balancing strategy", "REPEATS multiplies the image count; SAMPLES sets it.")
    loss_weight: float = opt(1.0, "Loss weight", "Multiplies this concept's loss; raise it to make a small concept count more.", ge=0)
    concept_stats: dict = opt(default_factory=dict, label="Statistics", tooltip="Statistics OneTrainer stores with a concept; kept as they are, not used for training.")

    image: ConceptImageConfig = opt(default_factory=ConceptImageConfig, label="Image augmentation", tooltip="Image augmentation settings.")
    text: ConceptTextConfig = opt(default_factory=ConceptTextConfig, label="Text augmentation", tooltip="Caption settings.")
