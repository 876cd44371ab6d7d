"""--kv-budget counts the bytes a path's own caches hold: a quantized row costs its packed
4- or 8-bit keys and values (with their scales), not bf16's."""

from batchlab.engine.paths.registry import resolve_path
from batchlab.serve.budget import measure_row_cost
from batchlab.zoo import load


def test_row_cost_is_the_paths_own_bytes_per_token():
    model = load("llama-hd64").model  # 2 layers, 2 KV heads of 64
    cost = {name: measure_row_cost(model, resolve_path(name, model).scheduler).per_token
            for name in ("l1", "kv8", "kv4", "kvmix")}
    # bf16: 2 layers x (K + V) x 2 heads x 64 x 2 bytes; 8 bits: 64 + 4 (scale, bias
    # per group of 64, bf16) bytes a head; 4 bits: 32 + 4; kvmix: one layer each
    assert cost == {"l1": 1024, "kv8": 544, "kv4": 288, "kvmix": 416}


def test_the_gemma3_ring_is_counted_to_its_window():
    model = load("gemma3").model
    cost = measure_row_cost(model)
    assert [window for window, _ in cost.window_per_token] == [8, 8]
    assert cost.per_token > 0 and cost.fixed == 0
