"""How the engine runs: one entry per path in ``registry.py``; each path brings its
scheduler and its caches."""
