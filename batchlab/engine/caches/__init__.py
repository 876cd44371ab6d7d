"""The batch caches the models write: full attention, sliding-window rings, per-row
windows, SSM / conv state, their masks and per-row ints."""
