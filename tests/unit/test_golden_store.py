"""Golden round trip, atomic writes, corruption and staleness: no model, milliseconds."""

import dataclasses
import json

import pytest

from batchlab.golden.store import Golden, GoldenError, Stamp, read_golden, write_golden
from batchlab.trajectory import Step, Trajectory

STAMP = Stamp(cell_id="llama/B2/equal/static/ctx-short", definition_digest="d" * 16,
              backend="cpu-x86_64", versions={"mlx": "0.32.4", "mlx_lm": "0.32.2"},
              fingerprint="f" * 16, schedule={"prefill_batch_size": 8})
FIX = "batchlab golden regen --filter 'llama/B2'"


def golden(rows=None) -> Golden:
    rows = rows or {"A": (Step(step=1, token=7, digest="ab" * 8, top=((7, -0.5), (3, -1.25))),),
                    "B": ()}
    return Golden(stamp=STAMP, oracle="test", dtype="bfloat16", serial_check="agrees",
                  oracle_bug=None, trajectory=Trajectory(rows=rows, dtype="bfloat16"))


def test_round_trip_is_exact(tmp_path):
    path = tmp_path / "g.json"
    write_golden(path, golden())
    back = read_golden(path, STAMP, FIX)
    assert back == golden()
    assert back.trajectory.rows["A"][0].top == ((7, -0.5), (3, -1.25))


def test_writing_twice_gives_identical_bytes(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_golden(a, golden())
    write_golden(b, golden())
    assert a.read_bytes() == b.read_bytes()
    assert not list(tmp_path.glob(".*.tmp"))  # the temp file was renamed, not left


def test_missing_golden_names_the_file_and_the_fix(tmp_path):
    with pytest.raises(GoldenError) as err:
        read_golden(tmp_path / "none.json", STAMP, FIX)
    assert err.value.status == "NO-GOLDEN"
    assert "none.json" in str(err.value) and FIX in str(err.value)


def test_truncated_golden_is_corrupt(tmp_path):
    path = tmp_path / "g.json"
    write_golden(path, golden())
    path.write_text(path.read_text()[:-40])
    with pytest.raises(GoldenError) as err:
        read_golden(path, STAMP, FIX)
    assert err.value.status == "CORRUPT" and FIX in str(err.value)


def test_hand_edited_golden_is_corrupt(tmp_path):
    path = tmp_path / "g.json"
    write_golden(path, golden())
    path.write_text(path.read_text().replace('"ab', '"ac', 1))
    with pytest.raises(GoldenError, match="content digest") as err:
        read_golden(path, STAMP, FIX)
    assert err.value.status == "CORRUPT"


@pytest.mark.parametrize("change, words", [
    ({"versions": {"mlx": "0.32.4", "mlx_lm": "0.31.0"}}, "mlx_lm 0.31.0"),
    ({"fingerprint": "0" * 16}, "model weights"),
    ({"backend": "cuda-sm90"}, "backend"),
    ({"definition_digest": "e" * 16}, "cell definition"),
])
def test_stale_goldens_say_why(tmp_path, change, words):
    path = tmp_path / "g.json"
    write_golden(path, dataclasses.replace(golden(), stamp=dataclasses.replace(STAMP, **change)))
    with pytest.raises(GoldenError) as err:
        read_golden(path, STAMP, FIX)
    assert err.value.status == "STALE" and words in str(err.value)


def test_golden_json_is_one_line_per_token(tmp_path):
    path = tmp_path / "g.json"
    write_golden(path, golden())
    text = path.read_text()
    assert '      [1,7,"abababababababab",[[7,-0.5],[3,-1.25]]]' in text
    assert json.loads(text)["rows"]["B"] == []


def test_logprob_sidecar_round_trips_and_a_changed_one_is_corrupt(tmp_path):
    """A golden whose steps carry logprobs keeps them beside it (the quantized-KV KL
    gate reads them); the golden holds their digest."""
    import numpy as np

    from batchlab.golden.store import values_path

    values = np.array([-0.5, -1.25, -3.0], dtype=np.float32)
    rows = {"A": (Step(step=1, token=0, digest="ab" * 8, top=((0, -0.5),), values=values),)}
    path = tmp_path / "g.json"
    write_golden(path, golden(rows))
    assert values_path(path).name == "g.values.json"
    back = read_golden(path, STAMP, FIX)
    assert back.trajectory.rows["A"][0].values.tolist() == [-0.5, -1.25, -3.0]
    write_golden(tmp_path / "h.json", golden(rows | {"A": (dataclasses.replace(
        rows["A"][0], values=values * 2),)}))
    values_path(path).write_text(values_path(tmp_path / "h.json").read_text())
    with pytest.raises(GoldenError, match="CORRUPT.*digest its golden holds"):
        read_golden(path, STAMP, FIX)
    write_golden(tmp_path / "plain.json", golden())  # no logprobs: no sidecar
    assert not values_path(tmp_path / "plain.json").exists()
