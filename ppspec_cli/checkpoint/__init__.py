"""Checkpoint metadata (config, index, safetensors headers; never weights) from a local directory,
the Hugging Face cache or the hub. The only place that talks to the hub."""
