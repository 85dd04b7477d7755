"""Textual messages that carry the live session's Events into the app.

The SessionState has already absorbed the event when its message is posted (so no data is lost
when messages coalesce); the messages say what to redraw. Ticks, progress and log lines replace
a pending message of their own kind (Toolong's `can_replace`): a burst of ticks while the UI is
busy or paused becomes one redraw.
"""

from __future__ import annotations

from textual.message import Message

from specmon import model


class EventMessage(Message):
    """One Event from the live session (or replay)."""

    def __init__(self, event: model.Event) -> None:
        super().__init__()
        self.event = event


class Tick(EventMessage):
    def can_replace(self, message: Message) -> bool:
        return isinstance(message, Tick)


class ArmInfoChanged(EventMessage):
    pass


class PhaseChanged(EventMessage):
    pass


class LogLines(EventMessage):
    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LogLines)


class LevelStarted(EventMessage):
    pass


class LevelProgress(EventMessage):
    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LevelProgress)


class LevelFinished(EventMessage):
    pass


class KneeCalled(EventMessage):
    pass


class RampFinished(EventMessage):
    pass


class MarkerAdded(EventMessage):
    pass


class SessionEnded(EventMessage):
    pass


class FleetMembership(EventMessage):
    """Workers joined or left a fleet: panels/rows to add or remove."""


_BY_EVENT: dict[type, type[EventMessage]] = {
    model.SamplesTick: Tick,
    model.ArmInfoUpdated: ArmInfoChanged,
    model.ArmPhase: PhaseChanged,
    model.LogLine: LogLines,
    model.LevelStarted: LevelStarted,
    model.LevelProgress: LevelProgress,
    model.LevelFinished: LevelFinished,
    model.KneeCalled: KneeCalled,
    model.RampFinished: RampFinished,
    model.Marker: MarkerAdded,
    model.SessionEnded: SessionEnded,
    model.FleetChanged: FleetMembership,
}


def message_for(event: model.Event) -> EventMessage:
    return _BY_EVENT.get(type(event), EventMessage)(event)


class LiveStopped(Message):
    """live.run returned (or raised): the session is over; the display stays for reading."""

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason
