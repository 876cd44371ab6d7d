"""Zoo variants with another sliding window: same weights, another config and id."""

import pytest

from batchlab.zoo import ZOO
from batchlab.zoo.variants import base_name, variant_spec


def test_a_variant_changes_only_the_window():
    spec = variant_spec("gemma3@w4")
    assert spec.name == "gemma3"  # the weights are seeded by the name: unchanged
    assert spec.config == {**ZOO["gemma3"].config, "sliding_window": 4}
    assert base_name("gemma3@w4") == "gemma3" and base_name("llama") == "llama"


@pytest.mark.parametrize("name, message", [
    ("llama@w4", "llama has no sliding window"),
    ("nope@w4", "'nope' is not a zoo model"),
    ("gemma3@w0", "the window must be >= 1"),
    ("gemma3", "not a zoo variant"),
])
def test_bad_variants_say_what_exists(name, message):
    with pytest.raises(ValueError, match=message):
        variant_spec(name)


def test_a_variant_loads_with_the_base_weights_and_its_own_config():
    from batchlab.golden.check import model_fingerprint
    from batchlab.zoo import load

    base, variant = load("gemma3"), load("gemma3@w3")
    assert variant.config["sliding_window"] == 3
    assert variant.fingerprint == base.fingerprint
    assert model_fingerprint("gemma3@w3") != model_fingerprint("gemma3")
