#!/bin/bash
cd /work/wt-refusals && . .venv/bin/activate && export PYTHONWARNINGS=ignore
M="python tools/mutant_after_import.py"
R='refuse-requests'; Q='llama-hd96,kv4h'; N='nemotron-h'
run(){ echo "== $1"; shift; $M "$@" 2>&1 | grep -v transformers | grep -v "^    "; }
run clean batchlab.engine.core.batch Request.__post_init__ 'max_tokens <= 0' 'max_tokens <= 0' "$R,$Q,$N"
run "sampler SamplingParams.__post_init____mutmut_2" batchlab.engine.core.sampler SamplingParams.__post_init__ 'self.temperature < 0
            or not 0 < self.top_p' 'self.temperature < 0 and not 0 < self.top_p' $R
run "sampler SamplingParams.__post_init____mutmut_6" batchlab.engine.core.sampler SamplingParams.__post_init__ 'or self.temperature < 0' 'or self.temperature <= 0' $R
run "sampler SamplingParams.__post_init____mutmut_37" batchlab.engine.core.sampler SamplingParams.__post_init__ 'self.xtc_probability <= 1 and' 'self.xtc_probability <= 2 and' $R
run "sampler SamplingParams.__post_init____mutmut_45" batchlab.engine.core.sampler SamplingParams.__post_init__ '"and 0 <= xtc_threshold <= 0.5 (mlx-lm'"'"'s bounds)"' '"AND 0 <= XTC_THRESHOLD <= 0.5 (MLX-LM'"'"'S BOUNDS)"' $R
run "processors ProcessorParams.__post_init____mutmut_5" batchlab.engine.core.processors ProcessorParams.__post_init__ 'if len(set(ids)) != len(ids)' 'if len(set(ids)) == len(ids)' $R
run "processors ProcessorParams.__post_init____mutmut_8" batchlab.engine.core.processors ProcessorParams.__post_init__ 'if size < 1:' 'if size < 2:' $R
run "batch Request.__post_init____mutmut_3" batchlab.engine.core.batch Request.__post_init__ 'max_tokens <= 0' 'max_tokens < 0' $R
run "scheduler Scheduler.insert__mutmut_3" batchlab.engine.core.scheduler Scheduler.insert 'raise ValueError(f"row {request.name!r} is already in flight; names are unique")' 'raise ValueError(None)' $R
run "quantized.path head_dims__mutmut_34" batchlab.engine.paths.quantized.path head_dims 'cfg.get("hidden_size") and cfg.get("num_attention_heads")' 'cfg.get("hidden_size") and cfg.get(None)' $Q
run "quantized.path head_dims__mutmut_36" batchlab.engine.paths.quantized.path head_dims 'cfg.get("hidden_size") and cfg.get("num_attention_heads")' 'cfg.get("hidden_size") and cfg.get("NUM_ATTENTION_HEADS")' $Q
run "quantized.path head_dims__mutmut_42" batchlab.engine.paths.quantized.path head_dims '// cfg["num_attention_heads"]' '// cfg["NUM_ATTENTION_HEADS"]' $Q
run "rotated BatchRotatedKV._pack_keys__mutmut_7" batchlab.engine.paths.quantized.rotated BatchRotatedKV._pack_keys 'keys.shape[-1]' 'keys.shape[-2]' $Q
run "rotated BatchRotatedKV._pack_keys__mutmut_9" batchlab.engine.paths.quantized.rotated BatchRotatedKV._pack_keys 'pack(keys @ h,' 'pack(None,' $Q
run "rotated BatchRotatedKV.unpacked__mutmut_14" batchlab.engine.paths.quantized.rotated BatchRotatedKV.unpacked 'unpack(k, q, dk,' 'unpack(k, dk,' $Q
run "rotated BatchRotatedKV.unpacked__mutmut_19" batchlab.engine.paths.quantized.rotated BatchRotatedKV.unpacked 'unpack(k, q, dk, getattr(mx, dtype))' 'unpack(k, q, dk, getattr(dtype))' $Q
run "rotated BatchRotatedKV.unpacked__mutmut_31" batchlab.engine.paths.quantized.rotated BatchRotatedKV.unpacked 'unpack(v, q, dv,' 'unpack(q, dv,' $Q
run "rotated BatchRotatedKV.unpacked__mutmut_32" batchlab.engine.paths.quantized.rotated BatchRotatedKV.unpacked 'unpack(v, q, dv,' 'unpack(v, dv,' $Q
run "invariant.modules UnsortedSwitchMLP.__call____mutmut_12" batchlab.engine.paths.invariant.modules UnsortedSwitchMLP.__call__ 'x = self.activation(self.fc1(x, indices))' 'x = None' $N
run "invariant.modules UnsortedSwitchMLP.__call____mutmut_23" batchlab.engine.paths.invariant.modules UnsortedSwitchMLP.__call__ 'squeeze(-2)' 'squeeze(+2)' $N
echo "== quantized.path refuses_quantized__mutmut_22 (applied to the source: the closure is built at import)"
sed -i 's/if scheme.rotated and dim & (dim - 1):/if scheme.rotated or dim \& (dim - 1):/' batchlab/engine/paths/quantized/path.py; git diff --stat | tail -1
$M batchlab.engine.core.batch Request.__post_init__ 'max_tokens <= 0' 'max_tokens <= 0' $Q 2>&1 | grep -v transformers; git checkout -q batchlab/engine/paths/quantized/path.py
echo "== quantized.path refuses_quantized__mutmut_23 (applied to the source)"
sed -i 's/if scheme.rotated and dim & (dim - 1):/if scheme.rotated and dim | (dim - 1):/' batchlab/engine/paths/quantized/path.py; git diff --stat | tail -1
$M batchlab.engine.core.batch Request.__post_init__ 'max_tokens <= 0' 'max_tokens <= 0' $Q 2>&1 | grep -v transformers; git checkout -q batchlab/engine/paths/quantized/path.py
git status --short
