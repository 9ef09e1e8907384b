"""Example tests of your own against a servecheck target, with the plugin's fixtures.

pytest docs/examples/pytest-plugin --target mine --targets-file targets.yaml
"""


def test_serves_the_model_we_deployed(servecheck_client, servecheck_target):
    ex = servecheck_client.get("/models")
    assert ex.status == 200, ex.error_message
    served = [m["id"] for m in ex.json()["data"]]
    assert servecheck_target.models[0] in served


def test_requests_carry_our_header(servecheck_client):
    ex = servecheck_client.get("/models")
    assert ex.request_headers.get("X-Team") == "search"


def test_a_short_answer(servecheck_context):
    # ok_json fails the test with servecheck's expected / received / curl message when it is not.
    body = servecheck_context.ok_json(servecheck_context.chat("Say hello.", max_tokens=8), "chat")
    assert body["choices"][0]["message"]["content"].strip()
