"""The batch-invariant path: its scheduler, row-blocked GEMMs and invariant modules."""
