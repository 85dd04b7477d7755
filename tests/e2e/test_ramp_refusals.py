from helpers.ramps import ramp_cli, RefusingServer
"""A ramp aimed at something that is not an SGLang server, or at one that fails every request:
refused before any load (exit 2), or backed off and ended with exit 3 (never 0: nothing was
measured). Real HTTP servers on 127.0.0.1."""


def test_a_server_failing_every_request_is_backed_off_and_exits_3(tmp_path):
    """500 to every /generate (SGLang on every other path): each of 4 streams backs off, 50 ms
    doubling to 1 s, so a 3 s level sends tens of requests, not thousands; no request of the
    ramp succeeded, so the ramp exits 3 and says so."""
    with RefusingServer(500) as srv:
        p, _ = ramp_cli(tmp_path / "s", srv.url, "--levels", "4", "--level-duration", "3", "--settle", "0",
                        "--input-len", "32", "--output-len", "4", timeout=90)
        sent = len(srv.generate)
    # per stream in 3 s: waits of at least 25, 50, 100, 200, 400, 500, 500, ... ms: at most ~10
    assert 4 <= sent <= 4 * 12, sent
    assert p.returncode == 3, (p.returncode, p.stderr[-800:])
    assert "no request of the ramp succeeded" in p.stderr and "HTTP 500" in p.stderr, p.stderr[-800:]
