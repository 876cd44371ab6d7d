"""JSON Schemas (draft 2020-12) of the exported script and of the trajectory file;
``batchlab matrix export`` writes them beside the scripts. ``docs/wire-protocol.md``
explains the fields."""

from __future__ import annotations

_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}}
_SAMPLING = {
    "type": "object", "required": ["temperature"],
    "properties": {"temperature": {"type": "number", "minimum": 0},
                   "top_p": {"type": "number"}, "top_k": {"type": "integer"},
                   "min_p": {"type": "number"}, "seed": {"type": "integer"},
                   "xtc_probability": {"type": "number"}, "xtc_threshold": {"type": "number"}},
    "description": "mlx-lm's make_sampler arguments; temperature 0 is greedy (argmax of the "
                   "logprobs, first index on ties); seed: MLX's global seed for the shared "
                   "sampler, set once before the first step",
}
_PROCESSORS = {
    "type": "object",
    "properties": {"logit_bias": {"type": "array", "items": {
        "type": "array", "prefixItems": [{"type": "integer"}, {"type": "number"}]}},
        **{f"{k}_penalty": {"type": "number"} for k in ("repetition", "presence", "frequency")},
        **{f"{k}_context_size": {"type": "integer"}
           for k in ("repetition", "presence", "frequency")}},
    "description": "mlx-lm's make_logits_processors arguments (0 switches a penalty off)",
}
SCRIPT_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "batchlab-script v1: one cell to run",
    "type": "object",
    "required": ["format", "version", "id", "model", "path", "schedule", "sampling", "rows",
                 "events", "trajectory"],
    "properties": {
        "format": {"const": "batchlab-script"}, "version": {"const": 1},
        "id": {"type": "string", "description": "the cell id; the trajectory names it"},
        "model": {"type": "string", "description": "zoo name or model directory"},
        "model_dir": {"type": "string", "description": "the directory mlx_lm.load reads"},
        "path": {"type": "string", "description": "the cell's path (l1: plain batch mode)"},
        "schedule": {"type": "object", "properties": {
            "prefill_batch_size": {"type": "integer"},
            "completion_batch_size": {"type": "integer"},
            "prefill_step_size": {"type": "integer"}},
            "description": "BatchGenerator's schedule arguments of the same names"},
        "sampling": _SAMPLING,
        "rows": {"type": "array", "items": {
            "type": "object", "required": ["name", "prompt", "max_tokens"],
            "properties": {"name": {"type": "string"}, "prompt": _IDS,
                           "max_tokens": {"type": "integer", "minimum": 1},
                           "prefix": {**_IDS, "description": "ids the row's caches hold "
                                      "before its prompt (a single-stream prefill)"},
                           "resume": {**_IDS, "description": "the ids a resume or continue "
                                      "event brings"},
                           "sampling": _SAMPLING, "processors": _PROCESSORS}}},
        "events": {"type": "array", "items": {
            "type": "object", "required": ["step", "action", "rows"],
            "properties": {"step": {"type": "integer", "minimum": 0},
                           "action": {"enum": ["insert", "remove", "park", "resume",
                                               "continue"]},
                           "rows": {"type": "array", "items": {"type": "string"}}}},
            "description": "applied just before decode step `step`, in this order"},
        "trajectory": {"type": "string", "description": "the file name to write"},
    },
}
_LOGPROBS = {"oneOf": [
    {"type": "object", "required": ["dtype", "b64"],
     "properties": {"dtype": {"enum": ["bfloat16", "float16", "float32"]},
                    "b64": {"type": "string"}}},
    {"type": "object", "required": ["digest", "top"],
     "properties": {"digest": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
                    "top": {"type": "array"}}}]}
TRAJECTORY_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "batchlab-trajectory v1: what one cell emitted",
    "type": "object",
    "required": ["format", "version", "id"],
    "properties": {
        "format": {"const": "batchlab-trajectory"}, "version": {"const": 1},
        "id": {"type": "string"}, "dtype": {"type": "string"},
        "unsupported": {"type": "string", "description": "the engine cannot run the cell"},
        "error": {"type": "string", "description": "the engine failed running it"},
        "rows": {"type": "object", "additionalProperties": {"type": "array", "items": {
            "type": "object", "required": ["step", "token"],
            "properties": {"step": {"type": "integer"}, "token": {"type": "integer"},
                           "logprobs": _LOGPROBS, "digest": {"type": "string"},
                           "top": {"type": "array"}}}}},
    },
}
