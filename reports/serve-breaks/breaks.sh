#!/bin/bash
# break FILE PYTHON-REPLACE(old,new) TEST: apply, run the test, report, restore
cd /work/wt-serve
run() {
  local name="$1" file="$2" old="$3" new="$4" test="$5"
  python - "$file" "$old" "$new" <<'PY'
import sys
p, old, new = sys.argv[1:]
s = open(p).read()
assert old in s, ("not found", old)
open(p, "w").write(s.replace(old, new, 1))
PY
  out=$(timeout 300 pytest "$test" -x -q -p no:xdist 2>&1 | grep -E "^(FAILED|ERROR)|passed|failed" | tail -2 | tr '\n' ' ')
  git checkout -q -- "$file"
  echo "BREAK [$name] -> $out"
}
run "health never degraded" batchlab/serve/engine_thread.py "DEGRADED_FOR_S = 60.0" "DEGRADED_FOR_S = 0.0" "tests/serve/test_faults.py::test_a_step_that_raises_fails_its_rows_and_the_queued_ones_go_on"
run "Done not sent when the cache insert raises" batchlab/serve/worker.py "            return None
" "            raise
" "tests/serve/test_faults.py::test_a_cache_entry_that_cannot_be_kept_leaves_the_answer_whole"
run "no chunking (a whole prompt a step)" batchlab/serve/admission.py "    if fixed:
        return budget" "    if True:
        return 10**9" "tests/serve/test_long_prompts.py::test_a_long_prompt_is_prefilled_a_chunk_a_step_between_a_running_rows_tokens"
run "max-prompt-tokens ignored" batchlab/serve/limits.py "        if cap is not None and prompt_tokens > cap:" "        if False:" "tests/serve/test_long_prompts.py::test_a_prompt_past_max_prompt_tokens_is_refused_with_the_numbers"
run "context ignored when max_tokens is named" batchlab/serve/limits.py "        if prompt_tokens + requested > context:" "        if False:" "tests/serve/test_long_prompts.py::test_token_limits_refuse_or_lower_as_the_context_allows"
run "quantized bytes: tuples not counted" batchlab/serve/prompt_cache.py "            out += [a for a in (part if isinstance(part, (tuple, list)) else (part,))" "            out += [a for a in (part[:1] if isinstance(part, (tuple, list)) else (part,))" "tests/serve/test_quantized_serve.py::test_a_finished_quantized_row_is_kept_and_every_array_counted"
run "store refused again" batchlab/serve/schema.py "    store: StrictBool | None = None" "" "tests/serve/test_openai_fields.py::test_every_field_gets_its_answer"
run "top_p 0 not greedy" batchlab/serve/generate.py "    if top_p == 0:" "    if top_p == -1:" "tests/serve/test_openai_fields.py::test_top_p_0_is_greedy_and_top_k_off_values_are_off"
run "text_offset empty" batchlab/serve/generate.py "            offsets.append(choice.text_offset)" "            pass" "tests/serve/test_openai_fields.py::test_completions_text_offset_counts_the_tokens_spellings"
run "stock h11 (plain-text 400)" batchlab/serve/server.py "config = uvicorn.Config(app, http=JSONErrorsH11Protocol," "config = uvicorn.Config(app, http='h11'," "tests/serve/test_api_edges.py::test_head_trailing_slashes_and_bad_framing_answer_in_json"
run "mid-body disconnect unhandled" batchlab/serve/request_io.py "    except ClientDisconnect:" "    except KeyError:" "tests/serve/test_api_edges.py::test_a_client_that_leaves_mid_body_is_one_log_line"
run "stats open without the key" batchlab/serve/app.py "        check_api_key(state, request)
        s = state.engine.stats()" "        s = state.engine.stats()" "tests/serve/test_api_edges.py::test_cors_and_the_api_key_on_every_route_but_health"
run "sampling defaults ignored" batchlab/serve/generate.py "        return getattr(defaults, name) if value is None else value" "        return getattr(type(defaults)(), name) if value is None else value" "tests/serve/test_api_edges.py::test_sampling_defaults_apply_where_a_request_names_none"
run "cancel does not evict a prefilling row" batchlab/serve/worker.py "            elif item.name in self.running:" "            elif False:" "tests/serve/test_long_prompts.py::test_a_client_that_leaves_stops_its_prefill_at_the_next_chunk"
run "second signal waits for the grace" batchlab/serve/server.py "            self.engine.begin_shutdown(0.0)
            self.uvicorn.force_exit = True
            self.uvicorn.should_exit = True" "            self.uvicorn.force_exit = True" "tests/serve/test_signal.py::test_a_second_signal_stops_at_once_whatever_the_grace"
