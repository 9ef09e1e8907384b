"""One module per surface; importing this package registers every check."""

from servecheck.checks.surfaces import (  # noqa: F401
    auth,
    cache,
    chat,
    client,
    concurrency,
    context,
    embeddings,
    errors,
    fuzz,
    health,
    json_mode,
    langchain,
    models,
    stream,
    text,
    tools,
)
