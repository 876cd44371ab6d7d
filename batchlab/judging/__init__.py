"""How the harness judges a cell: the reference and gate per path (``judging.py``), the
first divergence of two trajectories (``compare.py``) and the KL statistics (``kl.py``)."""
