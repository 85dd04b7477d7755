"""requests.csv joins with what the server saw, and levels.csv says which window its figures cover.

One real `specmon ramp --headless` against `specmon sim --wire-log` at speed 1 (the client's own
clock times every request, no scaling in the way): every row carries the server's request id,
the same one the simulator wrote in its wire log for that request, and stamps to the microsecond;
each level row's window (window_start, window_s) is the one its throughput was counted over.
"""


from helpers.requests_rid import SETTLE_S, session

JOIN_S = 0.1  # seconds


def test_every_request_row_carries_the_servers_rid_as_the_wire_log_has_it(session):
    reqs, _, wire = session
    assert len(reqs) >= 8
    served = {w["rid"]: w for w in wire if w["path"] == "/generate" and w["status"] == 200}
    rids = [r["rid"] for r in reqs]
    assert all(rids), "a row without the server's request id"
    assert len(set(rids)) == len(rids)
    # the same requests on both sides: each row is one the server served, and nothing it served
    # is missing from the recording
    assert set(rids) == set(served)
    for r in reqs:
        w = served[r["rid"]]
        # joined by id, the two clocks agree (same host, same wall clock): the server saw the
        # request after the client sent it, and the client's end is close to the server's last
        # body. Close, not after: the server stamps a body once its write returned to it, and a
        # busy server resumes later than the client reads the bytes (seen: 2.5 ms).
        assert float(r["t_start"]) <= w["t_in"] < float(r["t_start"]) + 1.0
        assert abs(float(r["t_end"]) - w["t_last_body"]) < JOIN_S
