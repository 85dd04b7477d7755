"""A level's load-client figures (model.LoadClientStats): typed in the ramp, the event and the
reader, yet written to session.json as the same object, key for key, that the ramp wrote when
they were a plain dict; older recordings (fewer keys, {} in their event log) still read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specmon.errors import UsageError
from specmon.model import ArmBackoff, LevelFinished, LevelResult, LoadClientStats, PacerStats
from specmon.session import codec
from specmon.session.folder import EVENTS_FILE, SessionWriter, read_meta
from specmon.session.recorded import load_session
from specmon.session.replay import read_event_log

DATA = Path(__file__).resolve().parents[1] / "data"


def _paced_with_backoff() -> LoadClientStats:
    return LoadClientStats(
        level=2, offered_concurrency=64, reader="C", tokens=131072, client_cpu_s=1.234, cpu_ms_per_1k_tokens=9.415,
        connect_s=0.0123, connections_opened_ahead={"a": 64, "b": 60},
        lag_p50_s=0.00107, lag_p99_s=0.9404, lag_max_s=None, lag_samples=79,
        pacer=PacerStats(pauses=812, pause_ms=2.5, chunk_gap_ms=None),
        server_pace={"a": 9.6272, "b": 8.5599},
        backoff={"a": ArmBackoff(backoff_s=12.5, backoff_share=0.0977, http={503: 7, 429: 3},
                                 no_answer={"connection refused": 2, "reset": 1}),
                 "b": ArmBackoff(backoff_s=0.0, backoff_share=None, http={429: 1})})


# What RampDriver._finish_level wrote for these figures when they were a dict: the keys in this
# order, "pacer" only on a paced level, an arm's refusals as http_<status> keys (by status) and
# its "no_answer" only when it has one.
AS_WRITTEN = {
    "level": 2, "offered_concurrency": 64, "reader": "C", "tokens": 131072, "client_cpu_s": 1.234,
    "cpu_ms_per_1k_tokens": 9.415, "connect_s": 0.0123, "connections_opened_ahead": {"a": 64, "b": 60},
    "lag_p50_s": 0.00107, "lag_p99_s": 0.9404, "lag_max_s": None, "lag_samples": 79,
    "pacer": {"pauses": 812, "pause_ms": 2.5, "chunk_gap_ms": None},
    "server_pace": {"a": 9.6272, "b": 8.5599},
    "backoff": {"a": {"backoff_s": 12.5, "backoff_share": 0.0977, "http_429": 3, "http_503": 7,
                      "no_answer": {"connection refused": 2, "reset": 1}},
                "b": {"backoff_s": 0.0, "backoff_share": None, "http_429": 1}},
}


def test_the_figures_are_written_as_the_dict_was_key_for_key():
    plain = codec.to_plain(_paced_with_backoff())
    assert json.dumps(plain) == json.dumps(AS_WRITTEN)  # the same keys in the same order, None as null
    unpaced = codec.to_plain(LoadClientStats(level=0, offered_concurrency=4, reader="Python", tokens=0,
                                             client_cpu_s=0.01))
    assert list(unpaced) == ["level", "offered_concurrency", "reader", "tokens", "client_cpu_s", "cpu_ms_per_1k_tokens",
                             "connect_s", "connections_opened_ahead", "lag_p50_s", "lag_p99_s", "lag_max_s",
                             "lag_samples", "server_pace", "backoff"]  # no "pacer": the level was not paced
    assert unpaced["server_pace"] is None and unpaced["backoff"] is None


def test_a_level_event_round_trips_through_the_event_codec():
    e = LevelFinished(level=2, results=[LevelResult(arm="a", level=2, offered_concurrency=64)],
                      load_client=_paced_with_backoff(), ts=5.0)
    line = codec.encode_event(e)
    assert json.loads(line)["load_client"] == AS_WRITTEN
    back = codec.decode_event(line)
    assert back == e and type(back.load_client) is LoadClientStats
    assert type(back.load_client.pacer) is PacerStats and type(back.load_client.backoff["a"]) is ArmBackoff
    assert back.load_client.backoff["a"].http == {429: 3, 503: 7}
    none = LevelFinished(level=0, results=[], ts=1.0)
    assert codec.decode_event(codec.encode_event(none)) == none


def test_session_json_holds_the_same_object_and_reads_back_typed(tmp_path):
    w = SessionWriter(tmp_path / "s")
    first = LoadClientStats(level=0, offered_concurrency=8, reader="C", tokens=2048, client_cpu_s=0.2,
                            cpu_ms_per_1k_tokens=97.656, connect_s=0.004, connections_opened_ahead={"a": 8},
                            lag_p50_s=0.0007, lag_p99_s=0.006, lag_max_s=0.006, lag_samples=62, server_pace={"a": 18.6})
    w(LevelFinished(level=0, results=[LevelResult(arm="a", level=0, offered_concurrency=8)], load_client=first, ts=1.0))
    w(LevelFinished(level=1, results=[LevelResult(arm="a", level=1, offered_concurrency=64)],
                    load_client=_paced_with_backoff(), ts=2.0))
    w(LevelFinished(level=2, results=[LevelResult(arm="a", level=2, offered_concurrency=64)], ts=3.0))  # no figures
    w.close()
    text = (tmp_path / "s" / "session.json").read_text()
    doc = json.loads(text)
    first_as_written = {"level": 0, "offered_concurrency": 8, "reader": "C", "tokens": 2048, "client_cpu_s": 0.2,
                        "cpu_ms_per_1k_tokens": 97.656, "connect_s": 0.004, "connections_opened_ahead": {"a": 8},
                        "lag_p50_s": 0.0007, "lag_p99_s": 0.006, "lag_max_s": 0.006, "lag_samples": 62,
                        "server_pace": {"a": 18.6}, "backoff": None}
    # the file, byte for byte, is the one the writer made when the ramp handed it these dicts
    assert text == json.dumps({**doc, "load_client": [first_as_written, AS_WRITTEN]}, indent=2) + "\n"
    meta = read_meta(tmp_path / "s")
    assert meta.load_client == [first, _paced_with_backoff()]
    assert all(type(s) is LoadClientStats for s in meta.load_client)
    assert json.dumps(meta.to_json(), indent=2) == json.dumps(doc, indent=2)  # read and written again: the same
    logged = [e.load_client for e in read_event_log(tmp_path / "s" / EVENTS_FILE) if isinstance(e, LevelFinished)]
    assert logged == [first, _paced_with_backoff(), None]


@pytest.mark.parametrize("name", ["session_gateway_fleet", "session_demo_2arm", "session_sim_1arm", "session_sim_3arm"])
def test_older_recordings_still_read_their_figures_typed(name):
    raw = json.loads((DATA / name / "session.json").read_text())["load_client"]
    rec = load_session(DATA / name)
    got = rec.meta.load_client
    assert len(got) == len(raw) and all(type(s) is LoadClientStats for s in got)
    for s, r in zip(got, raw):
        plain = codec.to_plain(s)
        assert {k: plain[k] for k in r} == r  # every recorded figure, as recorded
        assert all(plain[k] is None for k in plain if k not in r)  # later ones unknown, not made up
        assert s.reader is None and s.connect_s is None and s.pacer is None  # recorded before these were said
    assert got[0].level == 0 and got[0].tokens == raw[0]["tokens"]
    # their event logs: a level's figures as recorded, or {} for none (read as None)
    logged = [e.load_client for e in read_event_log(DATA / name / EVENTS_FILE) if isinstance(e, LevelFinished)]
    assert logged and all(x is None or type(x) is LoadClientStats for x in logged)


def test_the_gateway_recording_keeps_its_events_figures():
    logged = [e.load_client for e in read_event_log(DATA / "session_gateway_fleet" / EVENTS_FILE)
              if isinstance(e, LevelFinished)]
    assert [s.level for s in logged] == [0, 1, 2, 3, 4]
    assert logged[-1].lag_samples == 79 and logged[-1].server_pace is None and logged[-1].backoff is None


def test_a_load_client_entry_of_the_wrong_shape_is_one_clear_error(tmp_path):
    w = SessionWriter(tmp_path)
    w.close()
    doc = json.loads((tmp_path / "session.json").read_text())
    for bad in ([{"level": 0, "offered_concurrency": 4, "backoff": [1, 2]}],
                [{"level": 0, "offered_concurrency": 4, "pacer": {"pause_ms": 1.0}}],
                [{"offered_concurrency": 4}], ["x"]):
        doc["load_client"] = bad
        (tmp_path / "session.json").write_text(json.dumps(doc))
        with pytest.raises(UsageError, match="unexpected shape"):
            read_meta(tmp_path)
