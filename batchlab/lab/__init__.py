"""Lab gates: statistics for paths that have no bit-exact oracle."""
