"""The fault catalogue: one named defect per switch, each the defect a conformance check hunts.

``servecheck reference-server --fault NAME`` turns a fault on (repeatable);
``--list-faults`` prints this table. A self-test starts the server with each fault and asserts
that the check named in ``catches`` fails with its id, and that the clean server passes it.
Faults are looked up by name in the server code: ``if "stream-no-done" in state.faults``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Fault:
    name: str
    description: str
    catches: tuple[str, ...]  # the check ids this fault must make fail
    # A defect no check asserts, seen only by the strict schema profile (checks/schema.py): the
    # check ids it makes NON-STRICT (schema) by default and fail under strict mode.
    strict: tuple[str, ...] = ()


FAULTS: dict[str, Fault] = {}


def _fault(name: str, description: str, *catches: str, strict: tuple[str, ...] = ()) -> None:
    FAULTS[name] = Fault(name, description, tuple(catches), strict)


# Health and models
_fault("health-down", "/health answers 500 as if the engine died", "HEALTH-READY")
_fault(
    "health-lies",
    "/health says ok while completions answer 503 (model not loaded)",
    "HEALTH-SERVES",
)
_fault("health-loading-forever", "/health stays 503 'loading' forever", "HEALTH-READY")
_fault(
    "health-blocked-under-load",
    "/health answers only once no generation is running: behind long requests it times out and "
    "a load balancer evicts the busy server",
    "HEALTH-UNDER-LOAD",
)
_fault(
    "stream-refused-503",
    "every streamed request answers 503 while health says ok: HEALTH-UNDER-LOAD has no load to ask "
    "under and is not judged (an error), never skipped",
)
_fault("models-missing", "/v1/models lists no models", "MODELS-EXPECTED")
_fault(
    "models-wrong-name",
    "/v1/models lists a different served name than requests accept",
    "MODELS-EXPECTED",
)
_fault("models-no-context", "/v1/models omits max_model_len", "MODELS-CONTEXT")
_fault(
    "models-context-mismatch",
    "/v1/models reports a max_model_len different from the real limit",
    "MODELS-CONTEXT",
)
_fault(
    "unknown-model-accepted",
    "requests naming an unknown model are served anyway",
    "MODELS-UNKNOWN-404",
)
# Proven by a targeted test (tests/test_fault_matrix.py): MODELS-UNKNOWN-404 is not judged.
_fault(
    "completions-model-always-404",
    "every /v1/completions request answers 404 model_not_found, a served model's too: its 404 for "
    "an unknown model proves nothing",
)
_fault(
    "tokenize-500",
    "/tokenize answers 500 while tokenize is declared: COMPL-PROMPT-TOKENS and CHAT-LOGIT-BIAS are "
    "not judged (an error), never skipped",
)
_fault(
    "models-retrieve-missing",
    "GET /v1/models/{id} is not served: a listed model's id gets 404 (as vLLM 0.32 and llama.cpp)",
    "MODELS-RETRIEVE",
)

# Chat shape and semantics
_fault("chat-created-float", "'created' is a float, not an integer", "CHAT-SHAPE")
_fault("chat-bad-finish-reason", "finish_reason is 'eos' instead of an OpenAI value", "CHAT-SHAPE")
_fault(
    "usage-sum-wrong",
    "usage.total_tokens != prompt_tokens + completion_tokens",
    "CHAT-USAGE",
    "CHAT-USAGE-DETAILS",
)
_fault("max-tokens-ignored", "max_tokens is ignored: output runs past it", "CHAT-MAX-TOKENS")
_fault(
    "length-as-stop",
    "a cut output says finish_reason 'stop' instead of 'length'",
    "CHAT-MAX-TOKENS",
)
_fault("stop-ignored", "stop sequences are ignored", "CHAT-STOP")
_fault(
    "stop-leaks",
    "a request's stop strings stay on for the next requests that send none (sglang's shared "
    "sampling params)",
    "CHAT-STOP",
)
_fault("n-ignored", "n > 1 returns a single choice", "CHAT-N", "STREAM-N")
_fault(
    "nondeterministic",
    "temperature 0 still samples randomly",
    "CHAT-DETERMINISTIC",
    "STREAM-EQUALS-NONSTREAM",
)
_fault("seed-ignored", "seed does not make sampling repeatable", "CHAT-SEED")
_fault(
    "seed-pinned",
    "every seed is read as one fixed seed: different seeds give the same text at temperature 1",
    "CHAT-SEED-VARIES",
)
_fault(
    "completions-broken",
    "legacy /v1/completions answers with a chat-shaped body",
    "CHAT-COMPLETIONS",
)
_fault("logprobs-missing", "logprobs requested but absent", "CHAT-LOGPROBS")
_fault(
    "usage-details-overcount",
    "usage.completion_tokens_details.reasoning_tokens exceeds completion_tokens, streamed and not",
    "CHAT-USAGE-DETAILS",
)

# Legacy /v1/completions (servecheck/reference/completions.py)
_fault(
    "completions-batch-n-short",
    "a list of prompts is answered for its first prompt only (n choices, not prompts x n)",
    "COMPL-BATCH-N",
)
_fault(
    "token-id-prompt-refused",
    "a prompt of token ids (or a list of such lists) is refused with 400",
    "COMPL-TOKEN-IDS",
    "COMPL-PROMPT-INVALID",
)
_fault("echo-ignored", "echo true is accepted but the prompt is not echoed", "COMPL-ECHO")
_fault(
    "completions-prompt-tokens-off",
    "completions usage counts one prompt token more than /tokenize (a BOS counted twice)",
    "COMPL-PROMPT-TOKENS",
)
_fault(
    "completions-logprobs-misaligned",
    "legacy logprobs' text_offset list is one entry short and shifted by a token",
    "COMPL-LOGPROBS",
)
_fault(
    "completions-stream-stop-ignored",
    "streamed /v1/completions ignore stop: the text runs on through the stop string",
    "COMPL-STREAM",
)
_fault(
    "completions-stream-offset-reset",
    "streamed legacy logprobs count text_offset within each chunk: every chunk's offset is 0",
    "COMPL-STREAM",
)
_fault(
    "token-id-range-500",
    "negative or out-of-vocabulary prompt token ids reach the embedding lookup: 500 IndexError",
    "COMPL-PROMPT-INVALID",
)
_fault(
    "empty-prompt-list-accepted",
    "prompt [] is answered 200, generated from the BOS alone",
    "COMPL-PROMPT-INVALID",
)
_fault(
    "completions-unknown-model-accepted",
    "/v1/completions serves a model name that is not served (chat still refuses it)",
    "MODELS-UNKNOWN-404",
)

# Logprobs
_fault(
    "logprobs-tokens-mismatch",
    "each logprobs token is decoded on its own and loses its leading space, so the tokens no longer spell the answer",
    "LOGPROBS-JOIN",
    "LOGPROBS-STREAM",
)
_fault(
    "logprobs-blank-content",
    "a request asking for logprobs (chat logprobs true, Responses include output_text.logprobs) "
    "is answered with empty content, which the same request without logprobs is not",
    "LOGPROBS-JOIN",
    "LOGPROBS-VALUES",
    "LOGPROBS-STREAM",
    "RESPONSES-LOGPROBS",
)
_fault(
    "logprobs-positive",
    "logprobs carry probabilities (0..1] instead of log-probabilities",
    "CHAT-LOGPROBS",
    "LOGPROBS-VALUES",
    "LOGPROBS-STREAM",
)
_fault(
    "top-logprobs-count-wrong",
    "top_logprobs holds one entry whatever top_logprobs asked for",
    "LOGPROBS-VALUES",
    "LOGPROBS-STREAM",
)
_fault(
    "logprobs-bytes-utf16",
    "logprobs bytes are the token's UTF-16 code units, not its UTF-8 bytes",
    "LOGPROBS-VALUES",
    "LOGPROBS-JOIN",
)
_fault(
    "stream-logprobs-mismatch",
    "each streamed chunk carries the previous token's logprobs: the first has none, the last token's never comes",
    "LOGPROBS-STREAM",
)
_fault(
    "logprobs-unasked",
    "logprobs are computed and sent on every answer: chat with logprobs false or left out gets "
    "logprobs.content, a legacy completion without logprobs gets the legacy logprobs object",
    "LOGPROBS-VALUES",
    "COMPL-LOGPROBS",
)
_fault(
    "logit-bias-ignored",
    "logit_bias is accepted and ignored: a token biased -100 is still sampled first",
    "CHAT-LOGIT-BIAS",
)

# Streaming
_fault("stream-no-role", "the first chunk carries no role", "STREAM-ROLE")
_fault("stream-role-twice", "the role is sent in every chunk", "STREAM-ROLE")
_fault("stream-id-changes", "chunk ids change within one stream", "STREAM-ID")
_fault(
    "stream-created-varies",
    "each chunk's created is one second after the previous one's (a timestamp taken per chunk)",
    "STREAM-ID",
)
_fault("stream-wrong-object", "chunks say object 'chat.completion'", "STREAM-OBJECT")
_fault("stream-finish-twice", "finish_reason appears in two chunks", "STREAM-FINISH")
_fault("stream-content-after-finish", "content arrives after the finish chunk", "STREAM-FINISH")
_fault("stream-usage-in-choices", "the usage chunk has non-empty choices", "STREAM-USAGE")
_fault(
    "stream-usage-no-choices",
    "the usage chunk has no choices key at all (the SDK's ChatCompletionChunk requires the list)",
    "STREAM-USAGE",
)
_fault(
    "stream-usage-placeholder",
    'every chunk before the usage chunk carries "usage": [] instead of no usage or null',
    "STREAM-USAGE",
)
_fault(
    "stream-usage-unasked",
    "every stream ends with a choices: [] usage chunk, include_usage asked for or not",
    "STREAM-USAGE",
    "COMPL-STREAM",
)
_fault(
    "stream-n-index-shared",
    "with n > 1 every content delta says index 0; role and finish chunks keep their own index",
    "STREAM-N",
)
_fault(
    "stream-usage-wrong",
    "the usage chunk's completion_tokens differ from the tokens streamed",
    "STREAM-USAGE",
    "COMPL-STREAM",
)
_fault(
    "stream-length-as-stop",
    "a streamed answer cut at max_tokens says finish_reason 'stop' (non-streamed says 'length')",
    "STREAM-EQUALS-NONSTREAM",
)
_fault(
    "stream-usage-repeated",
    "usage is sent on the finish chunk and again on the final usage chunk",
    "STREAM-USAGE",
)
_fault("stream-no-done", "the stream ends without data: [DONE]", "STREAM-DONE")
_fault(
    "stream-error-in-200",
    "a 200 stream carries an error object and no content",
    "STREAM-ERROR-OBJECT",
)
_fault(
    "stream-error-dropped",
    "a streamed request over the context gets a 200 stream that is then dropped, with no error event",
    "STREAM-ERROR-EVENT",
)
_fault(
    "stream-error-bare-line",
    "a streamed request over the context gets its error as a bare 'error: {...}' line inside the 200 "
    "stream, which SSE parsers ignore (llama.cpp before ggml-org/llama.cpp#16109)",
    "STREAM-ERROR-EVENT",
)
_fault(
    "stream-error-unmarked",
    "a streamed request over the context gets a 200 stream whose error is plain-text data (no "
    "error object, no content, no finish_reason), then [DONE]",
    "STREAM-ERROR-EVENT",
)
_fault(
    "stream-differs",
    "streamed text differs from the non-streamed text at temperature 0",
    "STREAM-EQUALS-NONSTREAM",
    "COMPL-STREAM",
)
_fault("utf8-split", "multi-byte characters split across chunks arrive as U+FFFD", "STREAM-UTF8")
_fault(
    "stream-buffered",
    "the whole stream is buffered and sent at once (gateway buffering)",
    "STREAM-INCREMENTAL",
)
_fault(
    "stream-block-buffered",
    "the stream is forwarded in 2 KiB blocks (a proxy's response buffers), several chunks per burst",
    "STREAM-INCREMENTAL",
)
_fault(
    "stream-stall", "the stream stops sending mid-generation and never finishes", "STREAM-NO-STALL"
)
_fault(
    "stream-stall-keepalive",
    "the stream stops generating mid-way but keeps sending ': ping' comments (an SSE layer's "
    "heartbeat), so per-read timeouts never fire",
    "STREAM-NO-STALL",
)
_fault(
    "stream-non-json",
    "one chunk is written as a Python dict repr (single quotes) instead of JSON",
    "STREAM-SSE-VALID",
    "CLIENT-SDK-STREAM",
    "CLIENT-LANGCHAIN-STREAM",
)
_fault(
    "stream-data-after-done",
    "a trailing metrics event is sent after data: [DONE]",
    "STREAM-SSE-VALID",
)
_fault(
    "stream-wrong-content-type",
    "the event stream is served as application/json (a framework default)",
    "STREAM-SSE-VALID",
)

# The official openai SDK end to end
_fault(
    "sdk-stale-content-encoding",
    "non-streamed answers keep 'Content-Encoding: gzip' on an uncompressed body (a gateway "
    "that decompressed the upstream answer but forwarded its header); raw-byte clients don't notice, the SDK cannot decode",
    "CLIENT-SDK-SYNC",
    "CLIENT-SDK-ASYNC",
    "CLIENT-SDK-PARSE",
    "CLIENT-LANGCHAIN-INVOKE",
)
_fault(
    "sdk-stream-null-delta",
    'the streamed finish chunk carries "delta": null instead of a delta object',
    "CLIENT-SDK-STREAM",
)
_fault(
    "sdk-json-fenced",
    "json_schema output is wrapped in a ```json markdown fence",
    "CLIENT-SDK-PARSE",
)

# JSON
_fault("json-mode-ignored", "response_format json_object is ignored (prose output)", "JSON-OBJECT")
_fault(
    "json-schema-ignored",
    "json_schema output does not follow the schema",
    "JSON-SCHEMA",
    "CLIENT-LANGCHAIN-STRUCTURED",
)
_fault(
    "json-schema-invalid-500",
    "an invalid schema crashes the request with 500",
    "JSON-SCHEMA-INVALID",
)
_fault(
    "json-schema-nested-ignored",
    "json_schema is enforced at the top level only: arrays of objects get items that break "
    "the item schema (a grammar backend that falls back on nested schemas)",
    "JSON-SCHEMA",
)
_fault(
    "json-stream-unconstrained",
    "streamed requests ignore response_format: the stream is prose (non-streamed answers are JSON)",
    "JSON-STREAM",
)

# Tools
_fault("tools-ignored", "tool_choice required is ignored (text answer)", "TOOLS-REQUIRED")
_fault(
    "tools-ignored-every-fifth",
    "a forced tool call is answered with text on every fifth such request, the first included: "
    "a model that misses now and then (the trials self-tests count it)",
    "TOOLS-REQUIRED",
)
_fault(
    "tools-args-invalid",
    "tool arguments are not valid JSON for the parameters schema",
    "TOOLS-ARGS-SCHEMA",
    "CLIENT-LANGCHAIN-TOOL",
)
_fault("tools-wrong-name", "named tool_choice calls a different function", "TOOLS-NAMED")
_fault("tools-finish-stop", "finish_reason is 'stop' after a tool call", "TOOLS-FINISH")
_fault(
    "tools-stream-finish-stop",
    "a streamed forced tool call's finish chunk says 'stop' (the non-streamed answer says 'tool_calls')",
    "TOOLS-FINISH",
)
_fault("tools-stream-no-index", "streamed tool-call deltas carry no index", "TOOLS-STREAM")
_fault(
    "tools-undefined-accepted",
    "a named tool that is not defined is accepted",
    "TOOLS-UNDEFINED-400",
)
_fault(
    "tools-result-rejected",
    "a 'tool' role message in the next turn is rejected",
    "TOOLS-RESULT-TURN",
)

_fault(
    "tools-parallel-ignored",
    "parallel_tool_calls false is ignored: a prompt naming two tools gets two calls",
    "TOOLS-PARALLEL-OFF",
)
_fault(
    "tools-length-as-tool-calls",
    "a tool call cut by max_tokens says finish_reason 'tool_calls' (vllm#9053), not 'length'",
    "TOOLS-LENGTH",
)
_fault(
    "tools-stream-shared-index",
    "parallel streamed tool calls all use index 0 and the first call's id (the SDK merges them)",
    "TOOLS-PARALLEL-STREAM",
)
_fault(
    "tool-args-escaping-broken",
    "tool-call arguments are HTML-escaped (&amp; &lt; &gt;) as by an autoescaping template: "
    "valid JSON that decodes to other strings",
    "TOOLS-ARGS-ESCAPING",
)

# Legal request shapes real clients send (servecheck/reference/shapes.py)
_fault(
    "content-parts-refused",
    "message content sent as an array of text parts is refused with 400 (string content only)",
    "REQ-CONTENT-PARTS",
)
_fault(
    "content-parts-repr",
    "array content reaches the template whole: the model reads the parts list's JSON, not its "
    "text (a template that prints message.content as it is)",
    "REQ-CONTENT-PARTS",
    "REQ-TOOL-HISTORY",
)
_fault(
    "developer-role-500",
    "a 'developer' message crashes the request with 500 (KeyError in the role mapping)",
    "REQ-DEVELOPER-ROLE",
)
_fault(
    "developer-role-dropped",
    "'developer' messages are accepted but silently left out of the prompt (sglang#40082)",
    "REQ-DEVELOPER-ROLE",
)
_fault(
    "null-optionals-refused",
    "optional fields sent as explicit null (n, stop, tools ...) are refused with 400 as wrong types",
    "REQ-NULL-OPTIONALS",
)
_fault(
    "client-fields-500",
    "a metadata field crashes the request with 500 (passed on to generate() as a keyword)",
    "REQ-CLIENT-FIELDS",
)
_fault(
    "penalties-500",
    "a non-zero frequency_penalty or presence_penalty crashes the request with 500 (the penalty "
    "kernel is only reached when a penalty applies)",
    "REQ-CLIENT-FIELDS",
)
_fault(
    "response-format-text-refused",
    "response_format {type: 'text'} (the default, sent explicitly) is refused with 400: only the "
    "JSON modes are known",
    "REQ-CLIENT-FIELDS",
)
_fault(
    "max-completion-tokens-ignored",
    "max_completion_tokens is ignored; only max_tokens limits the output (llama.cpp#13700)",
    "REQ-MAX-COMPLETION-TOKENS",
)
_fault(
    "rich-tool-schema-500",
    "a tool schema with anyOf crashes the request with 500 (the grammar compiler gives up)",
    "REQ-TOOL-SCHEMA-RICH",
)
_fault(
    "rich-tool-schema-nested-ignored",
    "a forced call's arguments follow the tool schema's top level only: nested objects come back empty",
    "REQ-TOOL-SCHEMA-RICH",
)
_fault(
    "tool-history-refused",
    "a tool message whose content is an array of text parts is refused with 400",
    "REQ-TOOL-HISTORY",
)
_fault(
    "tool-no-args-500",
    'a tool whose parameters have no properties, or a replayed call whose arguments are "{}", '
    "gives 500 (the chat template reads the first argument: IndexError)",
    "REQ-TOOL-HISTORY",
)
_fault(
    "tool-choice-none-ignored",
    "tool_choice 'none' is read as 'auto': a prompt naming a tool gets a tool call",
    "REQ-TOOL-CHOICE-NONE",
)

# Responses API (/v1/responses, servecheck/reference/responses.py)
_fault(
    "responses-content-type-text",
    "output message parts are typed 'text' (chat-style) instead of 'output_text'",
    "RESPONSES-SHAPE",
)
_fault(
    "responses-usage-sum-wrong",
    "usage.total_tokens != input_tokens + output_tokens",
    "RESPONSES-USAGE",
)
_fault(
    "responses-chat-sse",
    "the /responses stream is chat-completion chunks with data: [DONE] (a chat route behind it)",
    "RESPONSES-STREAM-EVENTS",
)
_fault(
    "responses-completed-empty-output",
    "response.completed carries an empty output list (vllm PR#30223)",
    "RESPONSES-STREAM-COMPLETED",
)
_fault(
    "responses-stream-differs",
    "streamed output_text deltas differ from the non-streamed text at temperature 0",
    "RESPONSES-STREAM-EQUALS",
)
_fault(
    "responses-stream-usage-wrong",
    "response.completed's usage counts 3 more output tokens than the non-streamed answer",
    "RESPONSES-STREAM-EQUALS",
)
_fault(
    "responses-instructions-dropped",
    "instructions are ignored: not in the prompt, not echoed",
    "RESPONSES-INSTRUCTIONS",
)
_fault(
    "responses-tool-as-text",
    "a forced function call comes back as <tool_call> text in an output_text part",
    "RESPONSES-TOOL-CALL",
)
_fault(
    "responses-stream-args-dropped",
    "one function_call_arguments delta is missing from a streamed call (done and completed are whole)",
    "RESPONSES-STREAM-TOOL",
)
_fault(
    "responses-tool-output-rejected",
    "a function_call_output input item is refused with 400",
    "RESPONSES-TOOL-OUTPUT",
)
_fault(
    "responses-format-ignored",
    "text.format json_schema is ignored (prose output)",
    "RESPONSES-FORMAT",
)
_fault(
    "responses-error-500",
    "invalid /responses bodies get a plain-text 500 instead of a 400 error object",
    "RESPONSES-ERROR",
)
_fault(
    "responses-incomplete-as-completed",
    "an answer cut by max_output_tokens says status 'completed' with no incomplete_details",
    "RESPONSES-MAX-OUTPUT",
)
_fault(
    "responses-stream-no-item-done",
    "a streamed function call never gets its response.output_item.done event",
    "RESPONSES-STREAM-TOOL",
)
_fault(
    "responses-stream-no-args-done",
    "a streamed function call never gets its response.function_call_arguments.done event",
    "RESPONSES-STREAM-TOOL",
)
_fault(
    "responses-created-at-float",
    "created_at is a float (time.time()) instead of whole seconds; the SDK's float type takes it",
    "RESPONSES-OPEN-SCHEMA",
    "RESPONSES-STREAM-OPEN-SCHEMA",
)
_fault(
    "responses-open-fields-missing",
    "the response object stops at the SDK's required fields: no completed_at, store, background, "
    "service_tier, presence_penalty ... (which the Open Responses schema requires)",
    "RESPONSES-OPEN-SCHEMA",
    "RESPONSES-STREAM-OPEN-SCHEMA",
)
_fault(
    "responses-system-item-dropped",
    "system and developer message items in input never reach the prompt",
    "RESPONSES-INPUT-ITEMS",
)
_fault(
    "responses-assistant-string-rejected",
    "an assistant input item whose content is a string (not output_text parts) is refused with 400",
    "RESPONSES-INPUT-ITEMS",
)
_fault(
    "responses-phase-rejected",
    "an assistant input item carrying phase (commentary / final_answer) is refused with 400",
    "RESPONSES-INPUT-ITEMS",
)
_fault(
    "responses-call-item-bare",
    "a function_call output item has no id and no status (the SDK's type leaves both optional)",
    "RESPONSES-TOOL-CHOICE-NAMED",
)
_fault(
    "responses-named-choice-as-required",
    "tool_choice {type: function, name} is treated as 'required': the first tool is called",
    "RESPONSES-TOOL-CHOICE-NAMED",
)
# Responses API, issue 25 wave 3 (event pairing, tool_choice none, cut calls, logprobs)
_fault(
    "responses-stream-id-changes",
    "response.completed carries another response id than response.created (the final object "
    "built afresh)",
    "RESPONSES-STREAM-PAIRS",
)
_fault(
    "responses-stream-part-unclosed",
    "a streamed message's content part is never closed: no response.content_part.done",
    "RESPONSES-STREAM-PAIRS",
)
_fault(
    "responses-stream-item-unannounced",
    "the output_text deltas name an item_id that no response.output_item.added announced",
    "RESPONSES-STREAM-PAIRS",
)
_fault(
    "responses-stream-early-usage",
    "response.created and response.in_progress already carry a (zero) usage object",
    "RESPONSES-STREAM-PAIRS",
)
_fault(
    "responses-tool-choice-none-ignored",
    "tool_choice 'none' is read as 'auto' on /v1/responses: a prompt naming a tool gets a "
    "function_call item",
    "RESPONSES-TOOL-CHOICE-NONE",
)
_fault(
    "responses-tool-length-ignored",
    "max_output_tokens is not applied to a forced function call: the whole call comes back, "
    "status completed, with more output tokens than allowed",
    "RESPONSES-TOOL-LENGTH",
)
_fault(
    "responses-tool-length-completed",
    "a function call cut by max_output_tokens is presented as a completed function_call item "
    "(its arguments cut mid-JSON)",
    "RESPONSES-TOOL-LENGTH",
)
_fault(
    "responses-tool-length-uncounted",
    "a forced call cut by max_output_tokens is marked incomplete, but its usage has no "
    "output_tokens, so the limit cannot be seen to hold",
    "RESPONSES-TOOL-LENGTH",
)
_fault(
    "responses-reasoning-tokens-over",
    "usage.output_tokens_details.reasoning_tokens counts the whole exchange (more than "
    "output_tokens)",
    "RESPONSES-USAGE",
)
_fault(
    "responses-completed-incomplete-details",
    "a completed response carries incomplete_details {reason: null} instead of null",
    "RESPONSES-USAGE",
)
_fault(
    "responses-format-unchecked",
    "text.format is not validated: json_schema without a schema, or an unknown format type, is "
    "served as plain text",
    "RESPONSES-ERROR",
)
_fault(
    "responses-item-keyerror-500",
    "a function_call_output without call_id or a tool of an unknown type escapes as a 500 "
    "(a KeyError in the handler)",
    "RESPONSES-ERROR",
)
_fault(
    "responses-call-id-optional",
    "a function_call input item without call_id is served: the server makes one up instead of "
    "refusing the item",
    "RESPONSES-ERROR",
)
_fault(
    "responses-logprobs-ignored",
    "include [message.output_text.logprobs] is ignored: output_text parts carry no logprobs",
    "RESPONSES-LOGPROBS",
)
_fault(
    "responses-logprobs-positive",
    "output_text logprobs are probabilities (0..1), not log-probabilities",
    "RESPONSES-LOGPROBS",
)
_fault(
    "responses-top-logprobs-count-wrong",
    "each output_text logprobs entry has 1 top_logprobs alternative whatever top_logprobs asks",
    "RESPONSES-LOGPROBS",
)
_fault(
    "responses-stream-logprobs-lag",
    "each output_text delta carries the previous token's logprobs entry (the last is lost), so "
    "the deltas' entries do not add up to the finished part's",
    "RESPONSES-LOGPROBS",
)
_fault(
    "responses-text-done-no-logprobs",
    "response.output_text.done carries logprobs [] although the deltas carried entries (vLLM 0.32)",
    "RESPONSES-LOGPROBS",
)
# Responses input shapes, the response store and parallel calls (RESPONSES-INPUT-ITEMS widened,
# RESPONSES-STORE, RESPONSES-TOOL-PARALLEL; the store: servecheck/reference/response_store.py)
_fault(
    "responses-developer-rejected",
    "a developer-role input item is refused with 400 (only system, user and assistant known)",
    "RESPONSES-INPUT-ITEMS",
)
_fault(
    "responses-output-parts-rejected",
    "a function_call_output whose output is a list of input_text parts is refused with 400",
    "RESPONSES-INPUT-ITEMS",
)
_fault(
    "responses-replay-needs-ids",
    "a replayed assistant message or function_call input item without id and status is refused "
    "with 400 (the output item's type read as the input's)",
    "RESPONSES-INPUT-ITEMS",
)
_fault(
    "responses-store-not-kept",
    "store true is accepted and echoed, but nothing is kept: GET /v1/responses/{id} and "
    "previous_response_id answer 404",
    "RESPONSES-STORE",
)
_fault(
    "responses-store-false-kept",
    "a store false response is kept anyway: GET /v1/responses/{id} returns it",
    "RESPONSES-STORE",
)
_fault(
    "responses-previous-ignored",
    "previous_response_id is accepted but its conversation never reaches the prompt",
    "RESPONSES-STORE",
)
_fault(
    "responses-previous-not-echoed",
    "a request chained by previous_response_id is served with its conversation, but the "
    "response says previous_response_id null",
    "RESPONSES-STORE",
)
_fault(
    "responses-instructions-inherited",
    "a request chained by previous_response_id gets its parent's instructions in the prompt",
    "RESPONSES-STORE",
)
_fault(
    "responses-branches-shared",
    "requests chained to one parent extend one shared history: a branch sees its sibling's turn",
    "RESPONSES-STORE",
)
_fault(
    "responses-parallel-ignored",
    "parallel_tool_calls false is ignored: a prompt naming two tools gets two function_call items",
    "RESPONSES-TOOL-PARALLEL",
)
_fault(
    "responses-parallel-stream-shared",
    "parallel streamed calls all use output_index 0 and the first call's call_id",
    "RESPONSES-TOOL-PARALLEL",
)

# Overload (servecheck/reference/overload.py; each brings a limit of 4 in flight when
# --max-inflight is not set)
_fault("overload-reset", "requests above capacity get their connection reset", "OVERLOAD-BURST")
_fault(
    "overload-500",
    "requests above capacity get a plain-text 500 (a crashed worker)",
    "OVERLOAD-BURST",
)
_fault(
    "overload-429-bare",
    "requests above capacity get 429 with a plain-text body, no OpenAI error object",
    "OVERLOAD-BURST",
)
_fault(
    "overload-no-retry-after",
    "429 answers above capacity carry no Retry-After header",
    "OVERLOAD-BURST",
)
_fault(
    "overload-wedged",
    "after a burst that was shed, the engine stays dead (health 500, every request 500)",
    "OVERLOAD-RECOVERS",
)
_fault(
    "overload-stream-error-in-200",
    "a streamed request above capacity gets a 200 event stream holding only an error event and "
    "[DONE] (admission decided after the response started)",
    "OVERLOAD-STREAM",
)
_fault(
    "overload-stream-cut",
    "a streamed request above capacity gets a 200 event stream with its role chunk, then the "
    "stream ends with no finish_reason and no [DONE] (the request was dropped mid-stream)",
    "OVERLOAD-STREAM",
)
# No check catches it: a capacity sweep does (tests/load/test_capacity_stops.py stops early on it)
_fault(
    "overload-queue-unbounded",
    "requests above capacity wait in a queue that grows without bound (latency climbs, the "
    "waiting gauge grows) while /health answers 200",
)
# No check catches it: a load run's recovery profile does (recovery_s, load/workload/phased.py;
# tests/load/test_profiles.py)
_fault(
    "overload-never-recovers",
    "after an overload (a request had to wait for a running slot: max_num_seqs, 4 unless set), "
    "every later first token comes 500 ms late: latency never returns to its pre-overload level",
)

# Context
_fault("ctx-silent-truncate", "over-long prompts are silently truncated with a 200", "CTX-OVERLONG")
_fault("ctx-500", "over-long prompts crash with a 500", "CTX-OVERLONG")
_fault("ctx-max-tokens-500", "max_tokens beyond the remaining room gives a 500", "CTX-MAX-TOKENS")
_fault(
    "ctx-max-tokens-overrun",
    "max_tokens beyond the room is neither rejected nor marked 'length'",
    "CTX-MAX-TOKENS",
)
_fault(
    "ctx-limit-lower",
    "the real context limit is 3/4 of the advertised max_model_len (llama.cpp's -c split across "
    "-np slots, a KV cache smaller than --max-model-len)",
    "CTX-FITS",
)

# Errors
_fault("err-malformed-500", "malformed JSON gives 500", "ERR-MALFORMED-JSON")
_fault("err-plain-text", "4xx answers are plain text, not an error object", "ERR-SHAPE")
_fault("err-empty-messages-200", "empty messages is served with a 200", "ERR-EMPTY-MESSAGES")
_fault("err-negative-max-tokens-200", "negative max_tokens is accepted", "ERR-VALUES")
_fault("err-temperature-500", "out-of-range temperature gives 500", "ERR-VALUES")
_fault(
    "range-values-500",
    "top_logprobs above 20, legacy logprobs above 5, logit_bias outside [-100, 100] or keyed by "
    "a non-integer, and seeds outside int64 give 500 (unchecked casts in the sampler)",
    "ERR-VALUES-RANGE",
)
_fault(
    "responses-seed-500",
    "a seed outside int64 on /v1/responses gives 500 (chat completions refuse it with 400)",
    "ERR-VALUES-RANGE",
)
_fault(
    "logit-bias-unchecked-500",
    "a logit_bias value that is not a number, or a key beyond the vocabulary, gives 500 (the "
    "value is cast and the key indexes the logits without a check)",
    "ERR-VALUES-RANGE",
)
_fault("err-wrong-type-500", "wrong field types give 500", "ERR-TYPES")
_fault(
    "non-object-body-500",
    "a JSON body that is a string, a number or null gives 500 (fields read without a type check)",
    "ERR-NON-OBJECT-BODY",
)
_fault(
    "response-format-unchecked",
    "a malformed response_format (not an object, unknown type, no json_schema) is served as text",
    "ERR-RESPONSE-FORMAT",
)
_fault(
    "tools-malformed-500",
    "malformed tools (no function, no name, an unknown type, parameters a string) give 500",
    "ERR-TOOLS-MALFORMED",
)
_fault(
    "response-format-refused",
    "any request carrying response_format gets 400, a valid json_object one too: refusing it "
    "is not validating it",
    "ERR-RESPONSE-FORMAT",
)
_fault(
    "tools-refused",
    "any request carrying tools gets 400, a valid one too: refusing tools is not validating them",
    "ERR-TOOLS-MALFORMED",
    "ERR-TOOL-CHOICE-MALFORMED",
)
_fault(
    "tool-choice-unchecked",
    "a tool_choice it cannot use (unknown string, no function, required with no tools) is served as auto",
    "ERR-TOOL-CHOICE-MALFORMED",
)
_fault(
    "messages-malformed-500",
    "a malformed message (a string, no role, content a number) gives 500 from the template renderer",
    "ERR-MESSAGES-MALFORMED",
)
_fault(
    "err-route-html",
    "unknown routes answer 404 with an HTML page (a web UI catch-all or proxy error page)",
    "ERR-UNKNOWN-ROUTE",
)

# Auth
_fault("auth-none", "the API key is not enforced", "AUTH-REQUIRED")
_fault("auth-echo-key", "error messages echo the presented key", "AUTH-NO-ECHO")

# Concurrency and robustness
_fault(
    "crash-concurrent-seed",
    "seeded requests batched with long concurrent prompts (prefill over 2048 tokens) crash the "
    "server for good (as vLLM CPU with chunked prefill)",
    "CONC-SEEDED",
)
_fault(
    "fuzz-500",
    "a stop list containing an empty string gives 500 (the stop matcher splits on it)",
    "FUZZ-NO-5XX",
)

# Embeddings and rerank (servecheck/reference/embeddings.py)
_fault("embed-nan", "an embedding carries NaN (a pooling overflow)", "EMBED-SHAPE")
_fault(
    "embed-base64-float64",
    "encoding_format base64 packs float64 instead of float32 (the float answer is right)",
    "EMBED-BASE64",
)
_fault(
    "embed-batch-reversed",
    "a batch's vectors come back in reverse order with indexes renumbered",
    "EMBED-BATCH-ORDER",
)
_fault("embed-dims-vary", "inputs over 8 tokens get one dimension less", "EMBED-DIMS")
_fault(
    "embed-dimensions-ignored",
    "the dimensions parameter is accepted (200) but full-size vectors come back",
    "EMBED-DIMS",
)
_fault(
    "embed-nondeterministic",
    "identical inputs get different vectors (noise added per request)",
    "EMBED-DETERMINISTIC",
)
_fault("embed-overlong-500", "an input over the context crashes with 500", "EMBED-OVERLONG")
_fault(
    "embed-overlong-silent",
    "an input over the context is embedded anyway and usage claims all its tokens",
    "EMBED-OVERLONG",
)
_fault("embed-usage-zero", "usage.prompt_tokens is 0 for embeddings", "EMBED-USAGE")
_fault(
    "embed-dimensions-unchecked",
    "dimensions 0, negative or above the model's size are accepted and the full vectors returned",
    "EMBED-DIMS",
)
_fault(
    "embed-empty-500",
    "an empty string input crashes the request with 500 (an empty batch reaches the model)",
    "EMBED-INPUT-FORMS",
)
_fault(
    "embed-token-ids-as-text",
    "token-id inputs are embedded as the text of their digits: another vector than the string's",
    "EMBED-INPUT-FORMS",
)
_fault(
    "rerank-unsorted", "rerank results come back in document order, not by score", "RERANK-SHAPE"
)
_fault("rerank-top-n-ignored", "top_n is ignored: every document comes back", "RERANK-TOP-N")
_fault(
    "rerank-top-n-500",
    "top_n above the number of documents crashes with a bare KeyError 500 (xorbitsai/inference#4679)",
    "RERANK-TOP-N",
)

# Prompt cache (servecheck/reference/prefix_cache.py)
_fault(
    "cache-details-missing",
    "usage carries no prompt_tokens_details although the prefix cache hit (vllm#16162)",
    "CACHE-HIT",
)
_fault("cache-over-prompt", "cached_tokens exceeds prompt_tokens on a cache hit", "CACHE-BOUNDS")
_fault(
    "cache-metrics-frozen",
    "the prefix-cache counters on /metrics never move while cached_tokens are reported",
    "CACHE-METRICS",
)

# Text integrity (servecheck/reference/text.py)
_fault(
    "text-mojibake",
    "non-streamed answers are UTF-8 read as Latin-1 (cafÃ© for café), as a gateway with the wrong charset",
    "TEXT-CLEAN",
    "TEXT-EXACT",
)
_fault(
    "text-byte-tokens",
    "streamed multi-byte characters arrive as raw byte tokens (<0xE4><0xBD><0xA0>)",
    "TEXT-CLEAN",
)
_fault(
    "text-lossy",
    "non-ASCII characters of non-streamed answers come back as U+FFFD",
    "TEXT-EXACT",
)
_fault("detok-mojibake", "/detokenize answers UTF-8 read as Latin-1", "TEXT-TOKENIZE-ROUNDTRIP")
_fault(
    "tokenizer-mismatch",
    "/tokenize serves another tokenizer than the model's (CJK characters counted twice)",
    "TEXT-LOCAL-TOKENIZER",
)
_fault(
    "prompt-tokens-double-bos",
    "chat usage counts one prompt token more than the rendered template (a BOS added twice)",
    "TEXT-PROMPT-TOKENS",
)

# Reasoning (any reasoning-* fault turns the reasoning mode on: reference/reasoning.py)
_fault(
    "reasoning-leak",
    "no reasoning parser: <think>...</think> and the reasoning arrive in content, the reasoning "
    "field is empty",
    "REASON-SEPARATED",
)
_fault(
    "reasoning-stream-split",
    "the streaming parser misses the end of the reasoning: its last pieces arrive as content "
    "(non-streamed answers split correctly)",
    "REASON-STREAM-EQUALS",
)
_fault(
    "reasoning-after-answer",
    "the last reasoning delta is sent after the first answer delta",
    "REASON-STREAM-ORDER",
)
_fault(
    "reasoning-cut-as-stop",
    "a max_tokens cut inside the reasoning says finish_reason 'stop' with an empty answer",
    "REASON-CUT-LENGTH",
)
_fault(
    "reasoning-tokens-zero",
    "usage.completion_tokens_details.reasoning_tokens is 0 although the answer reasoned",
    "REASON-USAGE",
)
_fault(
    "reasoning-json-leak",
    "with response_format JSON the reasoning is written into content before the JSON, which "
    "parses only once the reasoning is stripped",
    "REASON-JSON",
)
_fault(
    "reasoning-json-leak-n",
    "with response_format JSON and n=2 only choice 0 goes through the reasoning parser: choice "
    "1's content holds the reasoning and its markers before the JSON",
    "REASON-JSON",
)
_fault(
    "reasoning-tool-in-reasoning",
    "a forced tool call is written as text inside the reasoning; tool_calls is empty",
    "REASON-TOOLS",
)
_fault(
    "reasoning-off-ignored",
    "chat_template_kwargs enable_thinking: false is ignored: the model reasons anyway",
    "REASON-THINKING-OFF",
)
_fault(
    "reasoning-off-ignored-stream",
    "enable_thinking: false is honoured non-streamed but ignored when streaming: the stream "
    "reasons anyway",
    "REASON-THINKING-OFF",
)

# Image input on chat completions (reference/vision.py; the IMAGE-* checks: the vision ones run
# against --vision, IMAGE-REJECTED-TEXT-ONLY against the default text-only server)
_fault(
    "image-ignored",
    "a text-only server answers 200 to an image_url part, rendering only the text: the image is "
    "silently dropped",
    "IMAGE-REJECTED-TEXT-ONLY",
)
_fault(
    "image-500",
    "any image_url part crashes the request with a 500 (a processor that expects pixel_values)",
    "IMAGE-ANSWERS",
    "IMAGE-REJECTED-TEXT-ONLY",
)
_fault(
    "image-tokens-flat",
    "every image counts the same 16 prompt tokens whatever its size",
    "IMAGE-TOKENS-GROW",
)
_fault(
    "image-tokens-uncounted",
    "images are read but add nothing to usage.prompt_tokens",
    "IMAGE-TOKENS-GROW",
    "IMAGE-MULTI",
)
_fault(
    "image-first-only",
    "only the first image of a request is read; the others are dropped silently",
    "IMAGE-MULTI",
)
_fault(
    "image-multi-refused",
    "a request with more than one image is refused with a 400",
    "IMAGE-MULTI",
)
_fault(
    "image-bad-base64-accepted",
    "an image_url whose base64 does not decode is dropped and the request answered 200",
    "IMAGE-MALFORMED",
)
_fault(
    "image-bad-base64-500",
    "an image_url whose base64 does not decode crashes the request with a 500",
    "IMAGE-MALFORMED",
)
_fault(
    "image-type-unchecked",
    "the data URL's media type is not checked, and bytes that are no image are dropped with a 200",
    "IMAGE-MALFORMED",
)
_fault(
    "image-huge-500",
    "an image over the pixel limit crashes the request with a 500 (out of memory)",
    "IMAGE-HUGE",
)
_fault(
    "image-huge-dropped",
    "an image over the pixel limit is dropped silently and the text answered with a 200",
    "IMAGE-HUGE",
)
_fault(
    "image-messages-ignored",
    "a text-only server answers 200 to an Anthropic image block on /v1/messages, rendering only "
    "the text: the image is silently dropped",
    "IMAGE-MESSAGES-REJECTED-TEXT-ONLY",
)
_fault(
    "image-messages-dropped",
    "a vision server accepts an image block on /v1/messages but never reads it: input_tokens "
    "stay the text's alone",
    "IMAGE-MESSAGES-ANSWERS",
)

# The Anthropic Messages API (/v1/messages, reference/messages.py): each fires only there
for _name, _description, *_catches in (
    (
        "messages-content-string",
        "content is a plain string, not a list of content blocks",
        "MESSAGES-SHAPE",
    ),
    (
        "messages-stop-reason-openai",
        "stop_reason carries OpenAI's finish reasons (stop, length, "
        "tool_calls) instead of end_turn, max_tokens, stop_sequence, tool_use",
        "MESSAGES-SHAPE",
        "MESSAGES-STOP-MAX-TOKENS",
    ),
    (
        "messages-cut-as-end-turn",
        "an answer cut by max_tokens says stop_reason end_turn",
        "MESSAGES-STOP-MAX-TOKENS",
    ),
    (
        "messages-stop-sequence-unnamed",
        "an answer ended by a stop sequence says end_turn and stop_sequence null",
        "MESSAGES-STOP-SEQUENCE",
    ),
    ("messages-usage-wrong", "usage.output_tokens counts the prompt too", "MESSAGES-USAGE"),
    (
        "messages-stream-no-message-stop",
        "the event stream ends after message_delta, with no message_stop",
        "MESSAGES-STREAM-ORDER",
    ),
    (
        "messages-stream-order-wrong",
        "content_block_stop comes after message_delta",
        "MESSAGES-STREAM-ORDER",
    ),
    (
        "messages-stream-no-event-names",
        "stream events carry no 'event:' line (OpenAI-style "
        "data-only SSE): the anthropic SDK dispatches on the event name and sees nothing",
        "MESSAGES-STREAM-ORDER",
        "CLIENT-ANTHROPIC",
    ),
    (
        "messages-stream-differs",
        "the streamed text_deltas join to a different text than the "
        "non-streamed answer at temperature 0",
        "MESSAGES-STREAM-TEXT",
    ),
    (
        "messages-stream-usage-wrong",
        "message_delta's usage.output_tokens differs from the non-streamed answer's",
        "MESSAGES-STREAM-TEXT",
    ),
    (
        "messages-tool-input-string",
        "a tool_use block's input is a JSON string (OpenAI's arguments), not an object",
        "MESSAGES-TOOLS",
    ),
    (
        "messages-tool-input-invalid",
        "a tool_use block's input leaves out a required property and adds one the schema forbids",
        "MESSAGES-TOOLS",
    ),
    (
        "messages-tool-stop-end-turn",
        "an answer that is a tool_use block says stop_reason end_turn instead of tool_use",
        "MESSAGES-TOOLS",
    ),
    (
        "messages-stream-tool-json-broken",
        "a streamed tool_use's input_json_delta pieces lose one piece: they join to broken JSON",
        "MESSAGES-TOOLS",
    ),
    (
        "messages-tool-choice-any-ignored",
        "tool_choice {type: any} is read as auto: no tool is called",
        "MESSAGES-TOOL-CHOICE-ANY",
    ),
    (
        "messages-tool-choice-tool-as-any",
        "tool_choice {type: tool, name} calls the first tool, not the named one",
        "MESSAGES-TOOL-CHOICE-TOOL",
    ),
    (
        "messages-tool-choice-none-ignored",
        "tool_choice {type: none} is read as auto: a prompt naming a tool still gets the call",
        "MESSAGES-TOOL-CHOICE-NONE",
    ),
    (
        "messages-tool-result-rejected",
        "a user turn with tool_result blocks is refused with 400",
        "MESSAGES-TOOL-RESULT",
    ),
    (
        "messages-system-blocks-rejected",
        "system as a list of text blocks is refused with 400 (only a string accepted)",
        "MESSAGES-SYSTEM-BLOCKS",
    ),
    (
        "messages-system-dropped",
        "the system prompt never reaches the model (not counted in input_tokens)",
        "MESSAGES-SYSTEM-BLOCKS",
    ),
    (
        "messages-thinking-leak",
        "with thinking enabled the reasoning lands in the text block "
        "between <think> markers; no thinking block",
        "MESSAGES-THINKING",
    ),
    ("messages-auth-off", "/v1/messages serves requests without a key", "MESSAGES-AUTH"),
    (
        "messages-x-api-key-ignored",
        "/v1/messages reads only Authorization: Bearer: a key in "
        "x-api-key (what the anthropic SDK sends) is refused",
        "MESSAGES-AUTH",
    ),
    (
        "messages-error-openai-shape",
        "/v1/messages errors come in OpenAI's shape ({error: "
        "{message, type, param, code}}) without type: error",
        "MESSAGES-ERROR-SHAPE",
    ),
    (
        "messages-count-tokens-wrong",
        "/v1/messages/count_tokens leaves the system prompt out of its count",
        "MESSAGES-COUNT-TOKENS",
    ),
):
    _fault(_name, _description, *_catches)

# The strict schema profile (a profile, not a check: strict mode turns its findings into failures)
_fault(
    "schema-chunk-created-string",
    'stream chunks carry created as a JSON string ("1718000000"), as a proto3-JSON gateway '
    "writes an int64",
    strict=("STREAM-OBJECT", "STREAM-DONE"),
)

# Load and telemetry (not conformance checks; used by load and leak self-tests)
_fault("latency-spikes", "every 5th request waits an extra second before its first token")
_fault("kv-leak", "KV blocks of aborted (disconnected) requests are never freed", "CONC-DISCONNECT")
_fault("abort-leak", "disconnected requests stay in num_requests_running", "CONC-DISCONNECT")
# The error path (issue 45 item 3): no conformance check judges it; a soak whose mix has the
# errors member does, and names that member (tests/soak/test_soak_mix.py).
_fault(
    "error-path-leak",
    "each generation request refused with a 4xx (a prompt over the context, a malformed body) "
    "keeps one KV block for good: kv_usage on /metrics climbs with the refusals, as after "
    "over-limit requests on vLLM (#27073)",
)

# Engine truth (servecheck/reference/engine_metrics.py): no conformance check judges these; a
# load run's server section names each (tests/load/test_server_truth.py).
_fault(
    "metrics-undercount-generation",
    "vllm:generation_tokens_total counts three quarters of the tokens the usage fields report",
)
_fault(
    "metrics-no-ttft-histogram",
    "/metrics lacks vllm:time_to_first_token_seconds: the TTFT decomposition has no engine side",
)
_fault(
    "timings-disagree",
    "the per-request timings (llama.cpp's shape, as the timings quirk sends them) disagree with the answer: "
    "predicted_n is usage's completion_tokens + 2 and prompt_ms is 10 s longer than the prefill; "
    "a load run's timings.server checks (SRV-TTFT, SRV-QUEUE-PREFILL, SRV-TOKENS) name it",
)
_fault(
    "gateway-first-byte-delay",
    "every generation request waits 200 ms before the engine sees it (a buffering gateway): the "
    "client's TTFT grows, the engine's histograms do not",
)


# Hung but healthy (servecheck/reference/livelock.py): no conformance check judges it; the load
# and soak monitor does (analysis/hung.py; tests/load/test_hung.py).
_fault(
    "livelock",
    "after the livelock-after option (a time or a request count; 20 requests unless given) the engine "
    "generates nothing while /health and /v1/models answer 200 and /metrics reports the stuck "
    "requests as running with a flat generated-token counter: open streams stall, new ones hang",
)


# Shutdown (servecheck/reference/drain.py): no conformance check judges these; the drain verdict
# (servecheck/probes/drain.py, `servecheck drain`, `cutover --drain`) does (tests/load/test_drain.py).
_fault(
    "drain-cut-streams",
    "on SIGTERM, in-flight streams are dropped at once, without a finish reason or [DONE]",
)
_fault(
    "drain-hang",
    "on SIGTERM, the server keeps listening, accepts new requests and never answers them",
)
_fault(
    "drain-html-500",
    "on SIGTERM, the server keeps listening and answers new requests with an HTML 500 page",
)


# Runtime LoRA adapters (--lora: vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter)
_fault(
    "lora-not-listed",
    "a loaded LoRA adapter answers requests but /v1/models does not list it",
    "LORA-LISTED",
)
_fault(
    "lora-same-as-base",
    "requests to a loaded adapter are answered by the base model alone (the adapter's weights "
    "are never applied)",
    "LORA-DIFFERS",
)
_fault(
    "lora-unload-still-served",
    "unloading an adapter answers 200 and drops it from /v1/models, but requests naming it are "
    "still served",
    "LORA-UNLOAD-404",
)
_fault(
    "lora-swap-fails",
    "for 1 s after an adapter is loaded or unloaded every generation request answers 503 (an "
    "engine that drops traffic while it swaps weights): a cutover swap's swap_failed_requests "
    "counts them",
)
_fault(
    "lora-swap-stalls",
    "for 1 s after an adapter is loaded or unloaded every generation request waits until that "
    "second is over before it starts (an engine that pauses to swap weights): a cutover swap's "
    "swap_ttft_spike measures it",
)
_fault(
    "lora-bad-path-accepted",
    "loading an adapter from a path that does not exist answers 200 and lists it",
    "LORA-LOAD-BAD-PATH",
)

# What the agent clients send (issue 44): each refusal a server really had, caught by the replay
# of that client's recorded request (CLIENT-SHAPE-*, servecheck/checks/surfaces/client_shapes.py)
_fault(
    "messages-system-role-rejected",
    "a role: system message inside messages is refused with 400 (Claude Code sends one on every "
    "request; anthropics/claude-code #63544, vllm #44000)",
    "CLIENT-SHAPE-CLAUDE-CODE",
)
_fault(
    "messages-thinking-adaptive-rejected",
    "thinking {type: adaptive} is refused with 400 (only enabled and disabled known)",
    "CLIENT-SHAPE-CLAUDE-CODE",
)
_fault(
    "messages-extra-fields-rejected",
    "a request field the server does not know (context_management, output_config) is refused "
    "with 400, as a request model that forbids extra fields does",
    "CLIENT-SHAPE-CLAUDE-CODE",
)
_fault(
    "responses-builtin-tools-rejected",
    "a tool other than a function (web_search, namespace, custom) fails the whole request with "
    "400 instead of being declined",
    "CLIENT-SHAPE-CODEX",
)
_fault(
    "responses-default-length-16",
    "a request without max_output_tokens is cut at 16 tokens (the completions API's default) "
    "and marked incomplete",
    "CLIENT-SHAPE-CODEX",
)


# Invariants x variants (issue 43, servecheck/reference/grid_faults.py): each fault breaks one
# invariant on one request variant only; the broad faults above that break a cell on every
# variant are added to its catches by ``_also``.
def _also(name: str, *catches: str) -> None:
    f = FAULTS[name]
    FAULTS[name] = Fault(f.name, f.description, (*f.catches, *catches), f.strict)


_fault(
    "grid-usage-n2-stream",
    "a streamed n=2 answer's usage counts the first choice's tokens only",
    "GRID-USAGE[chat,stream,n=2,usage]",
    "GRID-USAGE[compl,stream,n=2,usage]",
)
_fault(
    "grid-usage-n2-plain",
    "a non-streamed n=2 answer's usage counts the first choice's tokens only",
    "GRID-USAGE[chat,plain,n=2]",
    "GRID-USAGE[compl,plain,n=2]",
)
_fault(
    "grid-usage-tools",
    "a tool-call answer reports completion_tokens 0, streamed and not",
    "GRID-USAGE[chat,plain,n=1,tools]",
    "GRID-USAGE[chat,stream,n=1,usage,tools]",
)
_also(
    "usage-sum-wrong",
    "GRID-USAGE[chat,plain,n=1]",
    "GRID-USAGE[chat,stream,n=1,usage]",
    "GRID-USAGE[compl,plain,n=1]",
    "GRID-USAGE[compl,stream,n=1,usage]",
)
_fault(
    "grid-finish-n2-stream-twice",
    "in a streamed n=2 answer the second choice is closed by two finish_reason chunks",
    "GRID-FINISH[chat,stream,n=2]",
    "GRID-FINISH[chat,stream,n=2,usage]",
    "GRID-FINISH[compl,stream,n=2]",
    "GRID-FINISH[compl,stream,n=2,usage]",
)
_fault(
    "grid-finish-n2-plain-empty",
    "a non-streamed n=2 answer's second choice has an empty finish_reason",
    "GRID-FINISH[chat,plain,n=2]",
    "GRID-FINISH[compl,plain,n=2]",
)
_fault(
    "grid-finish-tools-empty",
    "a forced tool call's choice has an empty finish_reason, streamed and not",
    "GRID-FINISH[chat,plain,n=1,tools]",
    "GRID-FINISH[chat,stream,n=1,usage,tools]",
)
_also("chat-bad-finish-reason", "GRID-FINISH[chat,plain,n=1]", "GRID-FINISH[compl,plain,n=1]")
_also(
    "stream-finish-twice",
    "GRID-FINISH[chat,stream,n=1]",
    "GRID-FINISH[chat,stream,n=1,usage]",
    "GRID-FINISH[compl,stream,n=1]",
    "GRID-FINISH[compl,stream,n=1,usage]",
)
_fault(
    "grid-role-repeated-n2",
    "in a streamed n=2 answer the second choice repeats role 'assistant' in its later deltas",
    "GRID-ROLE[chat,stream,n=2]",
    "GRID-ROLE[chat,stream,n=2,usage]",
)
_fault(
    "grid-role-tool-deltas",
    "a streamed tool call repeats role 'assistant' in its argument deltas",
    "GRID-ROLE[chat,stream,n=1,usage,tools]",
)
_fault(
    "grid-role-plain-n2",
    "a non-streamed n=2 answer's second message has role null",
    "GRID-ROLE[chat,plain,n=2]",
)
_fault(
    "grid-role-tools-plain",
    "a non-streamed tool call's message says role 'tool' instead of 'assistant'",
    "GRID-ROLE[chat,plain,n=1,tools]",
)
_also("completions-broken", "GRID-ROLE[chat,plain,n=1]")
_also("stream-role-twice", "GRID-ROLE[chat,stream,n=1]", "GRID-ROLE[chat,stream,n=1,usage]")
_fault(
    "grid-tool-id-repeated",
    "streamed tool-call argument deltas repeat the call's id and function name (the openai "
    "SDK concatenates them onto the first)",
    "GRID-TOOLS[chat,stream,n=1,usage,tools]",
)
_also("tools-args-invalid", "GRID-TOOLS[chat,plain,n=1,tools]")
_fault(
    "grid-stream-differs-n2",
    "in a streamed n=2 answer the second choice's text differs from the non-streamed one",
    "GRID-EQUAL[chat,stream,n=2]",
    "GRID-EQUAL[chat,stream,n=2,usage]",
    "GRID-EQUAL[compl,stream,n=2]",
    "GRID-EQUAL[compl,stream,n=2,usage]",
)
_also(
    "stream-differs",
    "GRID-EQUAL[chat,stream,n=1]",
    "GRID-EQUAL[chat,stream,n=1,usage]",
    "GRID-EQUAL[compl,stream,n=1]",
    "GRID-EQUAL[compl,stream,n=1,usage]",
)

# Client request shapes as grid variants (issue 43 item 5): the broad tool-call faults above break
# the clients' streamed tool calls too; these break one client's shape only.
_also("grid-usage-tools", "GRID-USAGE[chat,stream,n=1,usage,tools,ai-sdk]")
_also(
    "grid-finish-tools-empty",
    "GRID-FINISH[chat,stream,n=1,usage,tools,ai-sdk]",
    "GRID-FINISH[chat,stream,n=1,tools,openai-agents]",
)
_also(
    "grid-role-tool-deltas",
    "GRID-ROLE[chat,stream,n=1,usage,tools,ai-sdk]",
    "GRID-ROLE[chat,stream,n=1,tools,openai-agents]",
)
_also(
    "grid-tool-id-repeated",
    "GRID-TOOLS[chat,stream,n=1,usage,tools,ai-sdk]",
    "GRID-TOOLS[chat,stream,n=1,tools,openai-agents]",
)
_also("responses-usage-sum-wrong", "GRID-USAGE[responses,stream,n=1,codex]")
_fault(
    "grid-strict-tool-id-repeated",
    "a streamed tool call for a request whose tools are strict (the OpenAI Agents SDK sends "
    "strict: true) repeats the call's id and name in its argument deltas",
    "GRID-TOOLS[chat,stream,n=1,tools,openai-agents]",
)
_fault(
    "grid-messages-stop-twice",
    "a streamed Messages answer sends message_delta (with its stop_reason) twice",
    "GRID-FINISH[messages,stream,n=1,claude-code]",
    "GRID-USAGE[messages,stream,n=1,claude-code]",
)
_fault(
    "grid-messages-cache-uncounted",
    "a streamed Messages request with cache_control markers reports input_tokens 0 and no cache "
    "tokens in message_start",
    "GRID-USAGE[messages,stream,n=1,claude-code]",
)
_fault(
    "grid-responses-completed-twice",
    "a streamed response sends its terminal response.completed event twice",
    "GRID-FINISH[responses,stream,n=1,codex]",
    "GRID-USAGE[responses,stream,n=1,codex]",
)


# Production cases (issue 43 item 4, servecheck/reference/cases.py)
_fault(
    "stop-boundary-stream",
    "streamed answers match stop strings token by token: a stop string across two tokens is "
    "streamed through (the non-streamed answer stops)",
    "CHAT-STOP-BOUNDARY",
)
_also("stop-ignored", "CHAT-STOP-BOUNDARY")
_fault(
    "min-tokens-ignored",
    "min_tokens is accepted (200) and ignored: a stop string still ends the answer before it",
    "CHAT-MIN-TOKENS",
)
_fault(
    "responses-reasoning-call-twice",
    "a streamed response asked with reasoning lists its forced function_call twice in "
    "response.completed (vLLM #55284)",
    "RESPONSES-STREAM-REASONING-TOOL",
)
_fault(
    "image-bomb-500",
    "an image whose header declares more pixels than the decoder allows answers 500 (the "
    "decoder's DecompressionBombError escapes)",
    "IMAGE-OVERSIZED",
)


# Agent-sized requests (issue 44 item 3, servecheck/reference/agent_sized.py)
_fault(
    "agent-tools-stop-empty",
    "a request with 16 or more tools is answered finish_reason stop (end_turn) with empty content "
    "and no tool call, reasoning kept (llama.cpp with large toolsets and reasoning)",
    "AGENT-SIZED-TOOLS",
    "AGENT-SIZED-REASONING",
    "AGENT-SIZED-MESSAGES",
)
_fault(
    "agent-system-500",
    "a system prompt over 8000 tokens fails the request with a 500",
    "AGENT-SIZED-SYSTEM",
    "AGENT-SIZED-MESSAGES",
)


# The chat completions clients' parser rules (issue 44, CLIENT-SHAPE-* in
# servecheck/checks/surfaces/client_shapes_chat.py): stream faults above that break one of them.
_also(
    "stream-error-in-200",
    "CLIENT-SHAPE-AI-SDK",
    "CLIENT-SHAPE-OPENCODE",
    "CLIENT-SHAPE-OPENAI-AGENTS",
    "CLIENT-SHAPE-LANGCHAIN",
)
_also("stream-usage-no-choices", "CLIENT-SHAPE-AI-SDK", "CLIENT-SHAPE-OPENCODE")
_also("chat-created-float", "CLIENT-SHAPE-PYDANTIC-AI")
_also("tools-stream-no-index", "CLIENT-SHAPE-OPENCODE")

# Legal variations: quirks a correct client must accept. With any of them on, the whole
# catalogue must still pass (tests/test_fault_matrix.py).
QUIRKS: dict[str, str] = {
    "sse-no-space": "'data:' without the space after the colon",
    "sse-crlf": "CRLF line endings in the event stream",
    "sse-comments": "': keep-alive' comment lines between events",
    "sse-split": "every event split across several TCP writes, cutting through multi-byte characters",
    "extra-fields": "unknown extra fields in responses and chunks",
    "timings": "llama.cpp's per-request timings object (prompt_n, prompt_ms, predicted_n, "
    "predicted_ms, cache_n) in the last chunk of a stream and in a plain answer's body",
    "messages-cache-read": "/v1/messages usage reports all but one prompt token as "
    "cache_read_input_tokens (input_tokens counts only what the cache did not hold)",
    "stream-late-error": "a streamed request over the context is refused inside its 200 stream "
    '(data: {"error": {...}}, then data: [DONE]) instead of with a 400 before it',
    "image-huge-resized": "a vision server resizes an image over its pixel limit to fit and answers "
    "it (counted at the most tokens an image takes) instead of refusing it",
}


def describe(name: str) -> str:
    return FAULTS[name].description


def list_faults() -> str:
    width = max(len(n) for n in FAULTS)
    return "\n".join(
        f"{f.name:<{width}}  {f.description}"
        + (f"  [{', '.join(f.catches)}]" if f.catches else "")
        + (f"  [strict: {', '.join(f.strict)}]" if f.strict else "")
        for f in FAULTS.values()
    )
