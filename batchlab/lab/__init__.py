"""The lab: teacher-forced measurements of engine paths on real text (``batchlab lab kl``:
KL against a reference path, KV density). It drives the engine, so it sits above it; the
KL statistics it reports are the judge's (``batchlab/judging/kl.py``)."""
