"""The ``fast`` path (``path.py``) and what it runs in place of l1's decode forward:
the flat hidden state, fused and pretransposed projections, and on CUDA the one-row
step as a chain of kernels or one persistent kernel."""
