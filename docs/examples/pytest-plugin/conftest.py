"""Example conftest.py for your own repository: how servecheck's clients are made.

Every client of the session (your tests' ``servecheck_client`` and the catalogue's checks) is
made by the ``servecheck_client_factory`` fixture. Here each request also carries a team header,
as a gateway in front of the endpoint may require. For mTLS or a proxy, pass an httpx transport::

    ctx = ssl.create_default_context(cafile="ca.pem")
    ctx.load_cert_chain("client.pem", "client.key")
    return ServeClient.for_target(target, transport=httpx.HTTPTransport(verify=ctx))
    # or httpx.HTTPTransport(proxy="http://proxy.internal:3128")
"""

import pytest

from servecheck.client.http import ServeClient


@pytest.fixture(scope="session")
def servecheck_client_factory():
    def make(target):
        headers = {**target.headers, **target.auth_headers(), "X-Team": "search"}
        return ServeClient.for_target(target, headers=headers)

    return make
