"""Teacher-forced measurements of engine paths on real text (``batchlab lab kl``): above
the engine, beside the bench. The statistics' gates stay in ``batchlab.lab``."""
