import json
cells = {"l1/llama/B3/ragged/join-evict/ctx-wrap": "PASS",
         "kv4h/llama-hd64/B3/ragged/join/ctx-short/steps4": "PASS",
         "kv4h/llama-hd96/B3/ragged/join/ctx-short/steps4": "UNSUPPORTED",
         "kv4h/gemma3-hd64/B3/ragged/join/ctx-short/steps4": "UNSUPPORTED",
         "kv8-g32/llama-hd96/B2/ragged/join/ctx-short/steps4": "PASS"}
m = {"cells": {c: {"status": s, "seconds": 1.0} for c, s in cells.items()}, "lines": {}}
json.dump(m, open("/tmp/mut5trial-map.json", "w"))
e = "batchlab.engine."
names = [e + "caches.rowints.xǁRowIntsAttributeǁ__set_name____mutmut_4",
         e + "caches.rowints.xǁRowIntsAttributeǁ__set_name____mutmut_8",
         e + "paths.registry.x__kv_path__mutmut_7", e + "paths.registry.x__kv_path__mutmut_8",
         e + "paths.quantized.path.x_refuses_quantized__mutmut_22",
         e + "paths.quantized.path.x_refuses_quantized__mutmut_23"]
json.dump({"mutants": [{"name": n, "lines": []} for n in names]}, open("/tmp/mut5trial-plan.json", "w"))
