import pytest


@pytest.fixture(scope="module")
def private_zoo_cache(tmp_path_factory):
    """A private BATCHLAB_CACHE for a whole module; returns its zoo folder. A module that
    builds models from nothing opts in with ``pytestmark = usefixtures(...)``."""
    root = tmp_path_factory.mktemp("batchlab-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BATCHLAB_CACHE", str(root))
        yield root / "zoo"
