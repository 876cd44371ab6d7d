"""Read a GGUF file's header (metadata keys and tensor types) without loading a tensor.

`mx.load` reads GGUF too, but it either converts a tensor type to MLX or fails inside C++;
reading the header first lets the converter refuse a Q6_K or IQ2 file by name, with the
list of tensors that carry the type, before it spends a second on the weights.

    header = read_gguf_header(path)
    header.architecture            -> "llama"
    header.tensor_types["output.weight"] -> "Q6_K"

Layout (GGUF v2/v3, little-endian): magic b"GGUF", u32 version, u64 tensor count, u64 kv
count, the kv pairs (string key, u32 value type, value), then per tensor: string name, u32
n_dims, u64 dims (innermost first), u32 ggml type, u64 offset into the data section,
which starts at the next multiple of `general.alignment` (32) after the header. Strings are
a u64 length and UTF-8 bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# ggml_type ids (ggml.h) -> names; every id a GGUF may hold, so a refusal can name it.
GGML_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1",
    10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS",
    17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S",
    23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M",
    30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4",
}  # fmt: skip

# The types MLX's GGUF reader turns into arrays it can run as they are: plain floats, and
# the three block quantizations it maps onto its own affine group-32 layout.
SUPPORTED_TYPES = ("F32", "F16", "Q4_0", "Q4_1", "Q8_0")

# GGUF value types: struct format of the scalars; 8 = string, 9 = array.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}  # fmt: skip
_STRING, _ARRAY = 8, 9


class GGUFError(ValueError):
    """A GGUF file that batchlab cannot convert; the message says why and what to do."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GGUFHeader:
    version: int
    architecture: str
    tensor_types: dict[str, str]  # tensor name -> ggml type name, in file order
    tensor_shapes: dict[str, tuple[int, ...]]  # as MLX sees them (GGUF stores dims reversed)
    tensor_starts: dict[str, int]  # absolute file offset of each tensor's data
    scalars: dict[str, object]  # metadata keys with a scalar or string value

    def unsupported_tensors(self) -> dict[str, str]:
        return {n: t for n, t in self.tensor_types.items() if t not in SUPPORTED_TYPES}


def _read(f: BinaryIO, fmt: str):
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise GGUFError(f"{f.name}: the GGUF header ends early (truncated file?)")
    return struct.unpack(fmt, data)[0]


def _string(f: BinaryIO) -> str:
    length = _read(f, "<Q")
    return f.read(length).decode("utf-8", errors="replace")


def _value(f: BinaryIO, value_type: int):
    """One metadata value; arrays are skipped (the tokenizer's arrays come from mx.load)."""
    if value_type in _SCALARS:
        return _read(f, _SCALARS[value_type])
    if value_type == _STRING:
        return _string(f)
    if value_type == _ARRAY:
        item_type, count = _read(f, "<I"), _read(f, "<Q")
        if item_type in _SCALARS:
            f.seek(count * struct.calcsize(_SCALARS[item_type]), 1)
        else:
            for _ in range(count):
                _value(f, item_type)
        return None
    raise GGUFError(f"{f.name}: unknown GGUF metadata value type {value_type}")


def read_gguf_header(path: Path) -> GGUFHeader:
    """The header of the GGUF at `path`; GGUFError if it is not a GGUF v2/v3 file."""
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise GGUFError(f"{path} is not a GGUF file (no b'GGUF' magic at its start)")
        version = _read(f, "<I")
        if version not in (2, 3):
            raise GGUFError(f"{path}: GGUF version {version}; batchlab reads versions 2 and 3")
        num_tensors, num_kv = _read(f, "<Q"), _read(f, "<Q")
        scalars: dict[str, object] = {}
        for _ in range(num_kv):
            key = _string(f)
            value = _value(f, _read(f, "<I"))
            if value is not None:
                scalars[key] = value
        tensor_types, tensor_shapes, offsets = {}, {}, {}
        for _ in range(num_tensors):
            name = _string(f)
            dims = [_read(f, "<Q") for _ in range(_read(f, "<I"))]
            type_id = _read(f, "<I")
            offsets[name] = _read(f, "<Q")
            tensor_types[name] = GGML_TYPES.get(type_id, f"type{type_id}")
            tensor_shapes[name] = tuple(reversed(dims))
        # The data section starts at the next multiple of general.alignment (default 32).
        alignment = int(scalars.get("general.alignment", 32))
        data_start = -(-f.tell() // alignment) * alignment
    return GGUFHeader(
        version=version,
        architecture=str(scalars.get("general.architecture", "")),
        tensor_types=tensor_types,
        tensor_shapes=tensor_shapes,
        tensor_starts={name: data_start + offset for name, offset in offsets.items()},
        scalars=scalars,
    )
