#!/usr/bin/env node
// A protocol-conformance peer in another language: it speaks `batchlab-subject/1`
// (docs/wire-protocol.md) live, step by step, by replaying trajectory files an engine
// wrote offline, each emission at its recorded step, with the logprob row rebuilt as the
// raw bytes of the model's dtype. It runs no model: what it proves is that a program
// outside Python can be gated through the process protocol, and that the runner reads its
// bytes exactly (a tampered file FAILs like a wrong engine).
//
//   python -m batchlab.subjects.peer --scripts X/scripts --out X/traj   # any engine, offline
//   batchlab matrix run --engine 'process:node oracles/peers/replay_peer.js X/traj'
//
// The trajectory files must carry each emission's "values" (float32 of the row, as the
// reference peer writes them); a file's name is the script's "trajectory" name:
// <cell id with / as __>.<setup.digest>.json.
"use strict";
const crypto = require("crypto");
const fs = require("fs");
const path = require("path");
const readline = require("readline");

const PROTOCOL = "batchlab-subject/1";
const folder = process.argv[2];
if (!folder || !fs.existsSync(folder)) {
  process.stderr.write("usage: node replay_peer.js TRAJECTORY_FOLDER\n");
  process.exit(2);
}

// float32 -> float16 bits, exact for the values a float16 row holds
function half(f) {
  const u = new Uint32Array(new Float32Array([f]).buffer)[0];
  const sign = (u >>> 16) & 0x8000, exp = (u >>> 23) & 0xff, man = u & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (man ? 0x200 : 0); // inf, nan
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) return e < -10 ? sign : sign | ((man | 0x800000) >>> (14 - e)); // subnormal
  return sign | (e << 10) | (man >>> 13);
}

function rowBytes(values, dtype) {
  const f32 = Buffer.from(values, "base64");
  const n = f32.length / 4;
  if (dtype === "float32") return f32;
  const out = Buffer.alloc(n * 2);
  for (let i = 0; i < n; i++) {
    const bits = dtype === "bfloat16" ? f32.readUInt32LE(4 * i) >>> 16 : half(f32.readFloatLE(4 * i));
    out.writeUInt16LE(bits, 2 * i);
  }
  return out;
}

// The compact form keeps the row's digest, not its dtype, which may differ from the
// model's (a quantized model's rows can be float32): the dtype whose bytes give the
// recorded digest is the row's; none is a corrupt file.
function emission(e, file) {
  for (const d of [dtype, "float32", "bfloat16", "float16"]) {
    const bytes = rowBytes(e.values, d);
    if (crypto.createHash("sha256").update(bytes).digest("hex").slice(0, 16) === e.digest) {
      return { row: e.row, token: e.token, logprobs: { dtype: d, b64: bytes.toString("base64") } };
    }
  }
  throw new Error(`${file}: row ${e.row} step ${e.step}: no dtype of its values gives digest ${e.digest}`);
}

let pending = [], n = 0, dtype = null, file = null;

function open(setup) {
  const stem = setup.cell.split("/").join("__") + (setup.digest ? "." + setup.digest : "");
  file = path.join(folder, stem + ".json");
  if (!fs.existsSync(file)) return { ok: false, error: `no trajectory ${file}` };
  const t = JSON.parse(fs.readFileSync(file, "utf8"));
  if (t.unsupported) return { ok: false, unsupported: t.unsupported };
  if (t.error) return { ok: false, error: `the engine failed offline: ${t.error}` };
  dtype = t.dtype;
  pending = [];
  for (const [row, steps] of Object.entries(t.rows)) {
    for (const s of steps) {
      if (s.values === undefined) return { ok: false, error: `${file}: no "values" to replay` };
      pending.push({ step: s.step, row, token: s.token, values: s.values, digest: s.digest });
    }
  }
  pending.sort((a, b) => a.step - b.step); // stable: rows keep their order within a step
  n = 0;
  return { ok: true, dtype };
}

function active() {
  return new Set(pending.map((e) => e.row)).size;
}

function answer(msg) {
  switch (msg.op) {
    case "hello":
      return { ok: true, protocol: PROTOCOL, name: "replay-js",
               capabilities: { paths: null, history: true, sampling: true, processors: true,
                               schedule: ["prefill_batch_size", "completion_batch_size",
                                          "prefill_step_size"], controls_join: false } };
    case "open":
      return open(msg.setup);
    case "insert": case "remove":
      return { ok: true, active: active() }; // the rows' emissions are in the file
    case "step": {
      const emissions = [];
      while (pending.length && pending[0].step <= n) emissions.push(emission(pending.shift(), file));
      n += 1;
      return { ok: true, active: active(), emissions };
    }
    case "close":
      pending = [];
      return { ok: true };
    default:
      return { ok: false, error: `unknown op ${JSON.stringify(msg.op)}` };
  }
}

const lines = readline.createInterface({ input: process.stdin });
lines.on("line", (line) => {
  if (!line.trim()) return;
  const msg = JSON.parse(line);
  if (msg.op === "bye") process.exit(0);
  let reply;
  try {
    reply = answer(msg);
  } catch (err) {
    reply = { ok: false, error: String(err.message || err) }; // this cell's ERROR
  }
  process.stdout.write(JSON.stringify(reply) + "\n");
});
