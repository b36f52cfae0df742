"""ot_gradio: a browser-based trainer for diffusion image models."""

__version__ = "0.1.0"
