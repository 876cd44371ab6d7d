"""The gate measuring itself: branch coverage of the engine under the default matrix
(``coverage``) and mutation testing of the engine with the matrix and the unit tests as
the killers (``killers`` orders them so a mutant dies as early as it can)."""
