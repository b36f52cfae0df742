"""Pure data: the config schema, enums, JSON load/save, OneTrainer import, presets.

Imports nothing above it and never torch, so the page can use it."""
