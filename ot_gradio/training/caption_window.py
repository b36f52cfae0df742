"""Captions longer than the text encoder reads. CLIP reads 77 tokens (75 of text), and every
family's tokenizing cuts a caption there (`truncation=True`), as OneTrainer's does: the words
after the cut are never trained, and nothing said so. A WD14 tag list or a captioning model's
paragraph passes 75 tokens easily; a trigger word or an embedding's placeholder at its end then
teaches nothing. Where the family has a long-window encoder beside CLIP (T5, an LLM: Flux, SD 3),
that one reads the whole caption and nothing is said; the window warned of is CLIP's, the one
the SD 1.x/2.x, SDXL, Würstchen and Stable Cascade families read the caption with alone. SD 1.x/2.x
and SDXL can read more, in windows of 75 (`max_token_length`, models/long_captions.py): then the
limit is those windows' tokens, and the warning says where to raise it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

CLIP_WINDOW = 77
MOST_CAPTIONS = 20_000  # counted: enough to say how many, quick on any dataset (a fast tokenizer: ~1 s)


def window_warnings(tokenizers: Mapping[str, Any], captions: Iterable[tuple[Path, str]], transform: Callable[[str], str],
                    placeholders: Iterable[str] = (), windows: int = 1, can_widen: bool = False) -> list[str]:
    """One warning when captions (`(image, caption)`, before `transform`: an embedding's
    placeholder becomes its tokens) run past what the text encoders read (`windows` windows of
    CLIP's 75 tokens of text), naming a few and what they lose; one more when a trained
    embedding's placeholder lies past it. Nothing when any text encoder reads more than CLIP's
    77 tokens. `can_widen`: the family reads more with max_token_length (SD 1.x/2.x, SDXL), which
    the warning then names."""
    sizes = [int(getattr(t, "model_max_length", 0) or 0) for t in tokenizers.values()]
    if not sizes or max(sizes) > CLIP_WINDOW or min(sizes) <= 2:
        return []
    window = min(sizes)
    tokenizer = next(t for t in tokenizers.values() if int(t.model_max_length) == window)
    read = max(1, windows) * (window - 2)  # tokens of text read
    seen, over, cut_placeholder = 0, [], []
    for image, caption in captions:
        if seen >= MOST_CAPTIONS:
            break
        seen += 1
        text = transform(caption)
        ids = tokenizer(text, truncation=False, add_special_tokens=True, verbose=False).input_ids
        if len(ids) - 2 <= read:
            continue
        lost = tokenizer.decode(ids[1 + read:-1]).strip()
        over.append((image, lost))
        for placeholder in placeholders:
            at = caption.find(placeholder)
            if at >= 0 and len(tokenizer(transform(caption[:at]), truncation=False, add_special_tokens=False, verbose=False).input_ids) >= read:
                cut_placeholder.append((image, placeholder))
    if not over:
        return []
    shown = "; ".join(f"{Path(image).name} loses '{_short(lost)}'" for image, lost in over[:3])
    limit = f"the text encoder's {window}-token window ({read} of text)" if windows <= 1 else f"the {read} tokens of text read (Max caption tokens)"
    wider = ", read more with Training → Text encoder → Max caption tokens (150 or 225)" if can_widen and read < 225 else ""
    out = [f"{len(over)} of {seen} captions are longer than {limit}: the words past it are not trained ({shown}). Shorten "
           f"them{wider}, or put what matters (the trigger word) first"]
    if cut_placeholder:
        image, placeholder = cut_placeholder[0]
        out.append(f"{len(cut_placeholder)} caption(s) have an embedding's placeholder past {limit}, where it "
                   f"is cut off and not trained (e.g. '{placeholder}' in {Path(image).name}'s caption): move it to the front")
    return out


def _short(text: str, most: int = 60) -> str:
    return text if len(text) <= most else text[:most].rstrip() + "…"
