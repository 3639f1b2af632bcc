"""The adapter's routes, one module per group; each exposes ``register(app, core)``."""
