"""The paged path: KV in fixed-size blocks per layer, per-row block tables, prefix sharing."""
