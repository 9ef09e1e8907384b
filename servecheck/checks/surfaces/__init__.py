"""One module per surface, named after the surface's id (``ctx`` holds CTX-*); importing this
package registers every check."""

from servecheck.checks.surfaces import (  # noqa: F401
    auth,
    cache,
    chat,
    client,
    compl,
    conc,
    ctx,
    embed,
    err,
    fuzz,
    health,
    json,
    langchain,
    logprobs,
    messages,
    models,
    overload,
    reason,
    req,
    rerank,
    responses,
    stream,
    text,
    tools,
)
