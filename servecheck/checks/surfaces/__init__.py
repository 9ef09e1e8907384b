"""One module per surface; importing this package registers every check."""

from servecheck.checks.surfaces import (  # noqa: F401
    auth,
    chat,
    client,
    concurrency,
    context,
    errors,
    fuzz,
    health,
    json_mode,
    models,
    overload,
    responses,
    stream,
    tools,
    tools_parallel,
)
