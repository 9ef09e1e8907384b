"""The load generator: what runs inside a Locust process and sends the requests.

``locust_user`` is the only module of the library that imports ``locust``; it hands each
request to the API's request function (``apis``), which writes it with the plain-HTTP client
(``wire``), reads its stream (``reactor`` + ``stream``, or ``anthropic_events`` for Messages)
and gives the finished record to the keeper (``keeper``), which writes it and sends batches to
the master over Locust's channel (``transport``). ``live*`` is the live view (``--web``,
``--metrics-port``, OTLP).
"""
