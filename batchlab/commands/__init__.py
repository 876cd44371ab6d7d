"""The CLI's commands, one module per command group (parsing is in ``batchlab/cli.py``)."""
