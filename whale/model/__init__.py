"""Model layer: engine protocol, batched HF engine, model loading, trainer."""
