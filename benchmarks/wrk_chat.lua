-- wrk script for benchmarks/bench_capacity.py: the same streaming chat request servecheck's
-- benchmark scenario sends (64 tokens, usage in the stream), so both clients read the same streams.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "text/event-stream"
wrk.body = '{"model":"truth","messages":[{"role":"user","content":"Count to sixty-four."}],'
  .. '"max_tokens":64,"stream":true,"stream_options":{"include_usage":true},"temperature":0}'
