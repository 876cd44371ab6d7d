"""Subjects: the engines the matrix drives, behind one small protocol.

``protocol.py`` is the interface (open, insert, remove/park, step, emissions, declared
capabilities); ``drive.py`` runs a cell's script through any subject; the adapters are
``engine.py`` (batchlab's own paths), ``mlx_lm.py`` (mlx-lm's BatchGenerator under test),
``process.py`` (another process speaking ``wire.py``, the JSON-lines protocol, e.g. the
reference peer ``peer.py``) and ``files.py`` (scripts exported to files, trajectories read
back). How a cell is judged stays in ``batchlab/judging``: a subject never knows.
"""
