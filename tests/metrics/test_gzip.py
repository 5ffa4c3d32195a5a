"""toggled --metrics answers "Accept-Encoding: gzip" with a gzipped body
(Content-Encoding: gzip, Vary: Accept-Encoding) holding the same text, and
sends plain text to a scraper that does not ask for it or refuses it."""

import gzip
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from test_metrics import Env


@pytest.fixture
def tcp():
    e = Env("127.0.0.1:0")
    try:
        for i in range(3):
            e.agent("z-%d" % i, "gz")
        e.wait_agents(3)
        yield e
    finally:
        e.stop()


def fetch(e, accept=None):
    req = urllib.request.Request("http://%s/metrics" % e.address)
    if accept is not None:
        req.add_header("Accept-Encoding", accept)
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.headers, r.read()


def series(text):
    return {(s.name, tuple(sorted(s.labels.items())))
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_gzip_when_asked(tcp):
    h, plain = fetch(tcp)
    assert h.get("Content-Encoding") is None and h.get("Vary") == "Accept-Encoding"
    h, body = fetch(tcp, "gzip, deflate")
    assert h.get("Content-Encoding") == "gzip", dict(h)
    text = gzip.decompress(body).decode()
    assert series(text) == series(plain.decode())
    print("test_gzip_when_asked: /metrics at 3 agents: %d bytes, %d gzipped"
          % (len(plain), len(body)))
    assert len(body) * 4 < len(plain)
    for refused in ("identity", "gzip;q=0", "br"):
        h, body = fetch(tcp, refused)
        assert h.get("Content-Encoding") is None, refused
        assert series(body.decode()) == series(plain.decode())
