"""Image-to-video steps of a model that trains text-to-video too (Wan 2.2 TI2V 5B and LTX-2,
`image_to_video_share`; models/start_frame.py), shared by the training step (diffusion.py):

- Which clips of the batch start from their first frame: each with probability `share`, drawn
  from the step's per-sample draws (so every GPU of a run draws its part of one global batch); a
  clip of one latent frame (an image) never does, nothing would be left to learn. A share of 1
  draws nothing: every clip does.
- Their noisy latents get the model's clean first latent frame in place of the noised one (the
  image the clip starts from); the model reads the same rows as timestep 0 there.
- Their loss counts the frames after it only: the first frame's error is zero (its target is
  the prediction) and the clip's weight is F' / (F' - 1), so each such clip's loss is the mean
  over its other frames, as DiffSynth-Studio's (which drops the first frame from both).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def draw_given(latents: torch.Tensor, share: float, rand: Callable[[int], torch.Tensor]) -> torch.Tensor | None:
    """bool (B,): the clips whose first frame is given this step; None where none is (share 0, images)."""
    if share <= 0 or latents.ndim != 5 or latents.shape[2] < 2:
        return None
    count = latents.shape[0]
    rows = torch.ones(count, dtype=torch.bool) if share >= 1 else rand(count) < share
    return rows if bool(rows.any()) else None


def _rows(rows: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return rows.to(like.device).view(-1, *([1] * (like.ndim - 1)))


def with_first_frame(noisy: torch.Tensor, first: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """`noisy` (B, C, F', h, w) with `first` (B, C, 1, h, w) as the first latent frame of `rows`."""
    head = torch.where(_rows(rows, noisy), first.to(noisy.device, noisy.dtype), noisy[:, :, :1])
    return torch.cat([head, noisy[:, :, 1:]], dim=2)


def without_first_frame(pred: torch.Tensor, target: torch.Tensor, rows: torch.Tensor,
                        weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(target, per-sample weights) that leave the first latent frame of `rows` out of the loss:
    the target there is the prediction itself (no error, no gradient), and those rows' weights are
    raised by F' / (F' - 1), so the loss is their mean over the other frames."""
    keep = _rows(rows, target)
    head = torch.where(keep, pred[:, :, :1].detach().to(target.dtype), target[:, :, :1])
    frames = target.shape[2]
    scale = torch.where(rows.to(weights.device), frames / (frames - 1), 1.0).to(weights.dtype)
    return torch.cat([head, target[:, :, 1:]], dim=2), weights * scale
