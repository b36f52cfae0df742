"""What the video families (Wan, HunyuanVideo, LTX-2) share on top of the flow core: a sample is a
clip of `sample_frames` frames, the run's Frames cut to `frame_step` * k + 1 once
`configure_flow` has read the run (outside a run, the sample tool: SAMPLE_TOOL_FRAMES), and the
pipeline's output is its `frames`."""

from __future__ import annotations

import torch

from ot_gradio.models.common import keep_embedders_unquantized

SAMPLE_TOOL_FRAMES = 5  # a sample's frames outside a run (the sample tool): short, quick to make


class VideoSampling:
    """Mix in before FlowFamily: the sample length and the clip a sample is."""

    pipeline_output = "frames"
    sample_frames = SAMPLE_TOOL_FRAMES

    def configure_flow(self, config) -> None:
        """The run's sample length (its Frames, cut to frame_step * k + 1); the embedders stay out
        of the quantization that follows (keep_embedders_unquantized: the time embedder casts the
        timestep to its weights' type, which cannot be a stored 8- or 4-bit one)."""
        from ot_gradio.data.video import run_sampling

        super().configure_flow(config)
        sampling = run_sampling(config, self.frame_step)
        self.sample_frames = sampling.count(sampling.frames)
        keep_embedders_unquantized(self.transformer)

    def sample_options(self) -> dict:
        """A clip of `sample_frames` frames (frame_step * k + 1: the pipeline would round any other count)."""
        frames = (max(1, int(self.sample_frames)) - 1) // self.frame_step * self.frame_step + 1
        return {"max_sequence_length": self.text_encoder_sequence_length, "num_frames": frames}

    def decode_sample(self, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Pixels (B, 3, F, H, W): `sample` returns a clip's frames."""
        return self.decode_latents(latents)
