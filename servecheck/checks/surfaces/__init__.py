"""One module per surface, named after the surface's id (``ctx`` holds CTX-*); importing this
package registers every check."""

from servecheck.checks.surfaces import (  # noqa: F401
    auth,
    chat,
    client,
    conc,
    ctx,
    err,
    fuzz,
    health,
    json,
    models,
    overload,
    reason,
    responses,
    stream,
    tools,
)
