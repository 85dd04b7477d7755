"""A ramp aimed at something that is not an SGLang server, or at one that fails every request:
refused before any load (exit 2), or backed off and ended with exit 3 (never 0: nothing was
measured). Real HTTP servers on 127.0.0.1."""

import http.server
import threading

import pytest
from helpers.ramps import ramp_cli


class _PlainHandler(http.server.BaseHTTPRequestHandler):
    """Any web server that is not SGLang: 404 to every path, every request recorded."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _answer(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append(f"{self.command} {self.path}")
        body = b"<html>not found</html>"
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer


@pytest.mark.parametrize("extra", [[], ["--no-discover"]], ids=["discover", "no-discover"])
def test_ramp_refuses_a_plain_http_server_before_any_load(tmp_path, extra):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _PlainHandler)
    srv.seen = []
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        p, _ = ramp_cli(tmp_path / "s", url, "--levels", "2", "--level-duration", "3", *extra, timeout=60)
    finally:
        srv.shutdown()
        srv.server_close()
    assert p.returncode == 2, (p.returncode, p.stderr[-500:])
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "neither an SGLang server nor a gateway" in lines[0], lines
    assert not [r for r in srv.seen if r.startswith("POST")], srv.seen  # not one request of load
    assert "Traceback" not in p.stderr
