"""The self-test: seeded batching bugs that the parity gate must catch.

``catalog`` holds the bug records, ``inject`` / ``model_bugs`` how each is patched in
(and always out again), ``run`` the ``batchlab selftest`` command and its kill table.
"""
