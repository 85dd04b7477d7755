"""A folder recorded before the event log: its events are rebuilt from the CSVs (legacy.py), in
memory by replay, or written once as events.jsonl. The fixtures were converted that way, so the
rebuild must still give exactly what their event logs hold."""

import shutil
from pathlib import Path

import pytest

from specmon.model import SessionStarted
from specmon.session.folder import EVENTS_FILE
from specmon.session.legacy import write_event_log
from specmon.session.replay import ReplaySource

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.mark.parametrize("name", ["session_demo_2arm", "session_sim_1arm", "session_sim_3arm"])
def test_a_folder_without_its_event_log_replays_the_same_events(tmp_path, name):
    older = tmp_path / name
    shutil.copytree(DATA / name, older, ignore=shutil.ignore_patterns(EVENTS_FILE))
    rebuilt = ReplaySource(older).events
    recorded = ReplaySource(DATA / name).events
    assert len(rebuilt) == len(recorded) and rebuilt == recorded
    assert isinstance(rebuilt[0], SessionStarted) and rebuilt[0].arms == ReplaySource(older).arms
    assert not (older / EVENTS_FILE).exists()  # replay never writes into the folder

    write_event_log(older)  # the converter: afterwards the folder replays from its own log
    assert ReplaySource(older).events == recorded
    with pytest.raises(FileExistsError):
        write_event_log(older)
