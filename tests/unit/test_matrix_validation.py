"""A bad matrix is refused before anything runs, with the place and what to change."""

import pytest

from batchlab.cells.spec import expand, load_matrix

SWEEP = {"models": ["llama"], "batch": [2], "padding": ["ragged"], "scripts": ["static"],
         "contexts": ["short"]}


def cell(**kw):
    return {"model": "llama", "script": "abc", "prompts": {"A": [1, 2], "B": [3]},
            "events": ["insert A,B at 0"]} | kw


@pytest.mark.parametrize("data, message", [
    ({"sweep": [SWEEP | {"steps": 0}]}, r"\[\[sweep\]\] #1: steps must be an integer >= 1"),
    ({"defaults": {"steps": -2}, "sweep": [SWEEP]}, r"steps must be an integer >= 1, got -2"),
    ({"cell": [cell(steps=0)]}, r"\[\[cell\]\] #1: steps must be an integer >= 1"),
    ({"cell": [cell(prompts={"A": []})]}, r"prompt 'A' is empty"),
    ({"cell": [cell(prompts={"A": {"length": 0}})]}, r"prompt 'A' length must be an integer >= 1"),
    ({"contexts": {"none": 0}, "sweep": [SWEEP]}, r"context 'none' must be an integer >= 1"),
    ({"cell": [cell(prompts={"A": [1, 10**6], "B": [3]})]},
     r"token ids \[1000000\] outside 0\.\.319"),
    ({"cell": [cell(prompts={"A": [320], "B": [3]})]}, r"token ids \[320\] outside 0\.\.319"),
    ({"cell": [cell(prompts={"A": [-1, 5], "B": [3]})]}, r"token ids \[-1\] outside 0\.\.319"),
    ({"cell": [cell(script="a/b")]}, r"script 'a/b' cannot be part of a cell id"),
    ({"contexts": {"x/y": 4}, "sweep": [SWEEP]}, r"context name 'x/y' cannot be part"),
    ({"sweep": [SWEEP | {"paths": ["l1/x"]}]}, r"path 'l1/x' cannot be part of a cell id"),
    ({"cell": [cell(prompts={"A,B": [1]}, events=["insert A,B at 0"])]}, r"row name 'A,B'"),
    ({"cell": [cell(events=["insert A,B at 2", "remove A at 2"])]},
     r"row 'A' is removed at step 2, the step it is inserted; remove it at a later step"),
    ({"cell": [cell(events=["remove A at 2", "insert A,B at 2"])]}, r"the step it is inserted"),
    ({"cell": [cell(), cell(path="fast", prompts={"A": [1, 3], "B": [3]})]},
     (r"share the scenario \(and golden\) llama/B2/explicit/abc/ctx-explicit but define it "
      r"differently")),
    ({"sweep": [SWEEP | {"sampling": {"temperature": 1.0, "top_k": 320}}]},
     r"top_k 320 must be below the vocabulary size 320"),
    ({"sweep": [SWEEP | {"sampling": {"temperature": -1.0}}]}, r"temperature >= 0"),
    ({"sweep": [SWEEP | {"schedule": {"prefill_batch_size": 0}}]},
     r"schedule prefill_batch_size must be an integer >= 1"),
    ({"sweep": [SWEEP | {"schedule": {"prefill_batch": 2}}]}, r"unknown keys \['prefill_batch'\]"),
    ({"sweep": [SWEEP | {"batch": []}]}, r"'batch' is an empty list"),
    ({"sweep": [SWEEP | {"batch": [2.5]}]}, r"batch size must be an integer >= 1"),
    ({"sweep": [SWEEP | {"scripts": ["evict-many"]}]}, r"needs at least four rows"),
    ({"sweep": {"models": ["llama"]}}, r"must be an array of tables"),
])
def test_bad_matrix_is_refused_with_its_place_and_the_fix(data, message):
    with pytest.raises(ValueError, match=message):
        expand(data, where="m.toml")


def test_the_error_names_the_file_and_which_cell(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[[cell]]\nmodel = "llama"\nscript = "s"\nprompts = { A = [1] }\n'
                    'events = ["insert A at 0"]\n\n[[cell]]\nmodel = "llama"\nscript = "t"\n'
                    'prompts = { A = [999] }\nevents = ["insert A at 0"]\n')
    with pytest.raises(ValueError, match=rf"^{path} \[\[cell\]\] #2: row A of "):
        load_matrix(path)


def test_settings_off_their_defaults_are_named_in_the_id():
    cells = expand({"sweep": [SWEEP | {
        "steps": 40, "seed": 1,
        "schedule": [{"prefill_batch_size": 2, "completion_batch_size": 4},
                     {"prefill_step_size": 16}],
        "sampling": [{"temperature": 0.7, "top_k": 5, "top_p": 0.9, "min_p": 0.05,
                      "seed": 3}],
    }]})
    assert [c.id for c in cells] == [
        "l1/llama/B2/ragged/static/ctx-short/steps40_seed1_pb2_cb4_t0.7_k5_p0.9_m0.05_r3",
        "l1/llama/B2/ragged/static/ctx-short/steps40_seed1_ps16_t0.7_k5_p0.9_m0.05_r3",
    ]
    assert cells[0].schedule.prefill_batch_size == 2
    assert cells[1].schedule.prefill_step_size == 16
    assert cells[0].definition()["sampling"]["top_k"] == 5


def test_default_settings_leave_ids_and_definitions_as_they_were():
    (c,) = expand({"sweep": [SWEEP | {"steps": 12, "seed": 0, "schedule": {},
                                      "sampling": {"temperature": 0.0}}]})
    assert c.id == "l1/llama/B2/ragged/static/ctx-short"
    assert set(c.definition()) == {"model", "rows", "events"}


def test_explicit_cell_over_several_models():
    cells = expand({"cell": [{k: v for k, v in cell(models=["llama", "qwen3"]).items()
                              if k != "model"}]})
    assert [c.id for c in cells] == ["l1/llama/B2/explicit/abc/ctx-explicit",
                                     "l1/qwen3/B2/explicit/abc/ctx-explicit"]


def test_chat_and_corpus_prompts_in_an_explicit_cell():
    from batchlab.zoo.chat import chat_prompt
    from batchlab.zoo.corpus import corpus_prompt

    (c,) = expand({"cell": [cell(prompts={"A": {"chat": "hi"},
                                          "B": {"corpus": 100, "length": 7}})]})
    assert c.row("A").prompt == chat_prompt("llama", "hi")
    assert c.row("B").prompt == corpus_prompt("llama", 100, 7) and len(c.row("B").prompt) == 7
    with pytest.raises(ValueError, match=r"\[\[cell\]\] #1: prompt 'B': corpus slice"):
        expand({"cell": [cell(prompts={"A": [1], "B": {"corpus": 10**9, "length": 7}})]},
               where="m.toml")
