"""Sending a level's requests on the load loop: what the closed- and open-loop runners share
(one request sent and its outcome filled, the hand-over to the session's loop, the next
prompt, a skip, and waiting out a level's tasks)."""

from __future__ import annotations

import asyncio
from typing import Iterable, Optional

from specmon import clock
from specmon.load import GenerateClient, Prompt, RequestOutcome
from specmon.session.ramp.state import _LevelState


async def gather_all(tasks: Iterable[asyncio.Task], cancel: bool = False) -> None:
    """Wait until every task has ended, each cancelled first when `cancel` (a level cut short,
    skipped or stopped); what they raise is theirs, not the level's."""
    tasks = list(tasks)  # a set of sends shrinks as they end
    if cancel:
        for t in tasks:
            t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class Sending:
    """Mixed into RampDriver (driver.py): reads its plan, arms, denied, prompt counters and skip flag."""

    @staticmethod
    def _finished(level: _LevelState, arm: str, o: RequestOutcome) -> None:
        """Queue a finished request for the session's loop and wake it (once until it drains)."""
        level.finished.append((arm, o))
        if not level.woken and level.wake is not None:
            level.woken = True
            try:
                level.wake()
            except RuntimeError:  # the session's loop is closed: the level's own end drains it
                pass

    def _undenied(self) -> list[str]:
        """The names of the arms that still get requests (none refused this ramp's credentials)."""
        return [a.name for a in self.arms if a.name not in self.denied]

    def _take_prompt(self, arm: str) -> int:
        """The next prompt (conversation) index of this arm: every arm sends the same sequence."""
        idx = self._next_prompt[arm]
        self._next_prompt[arm] = idx + 1
        return idx

    async def _send(self, level: _LevelState, arm: str, client: GenerateClient, prompt: Prompt, o: RequestOutcome,
                    cancelled_why: str, slots: Optional[asyncio.Semaphore] = None,
                    output_len: Optional[int] = None) -> None:
        """One request of a level (after a free slot, when given), its outcome filled whatever
        happens: a failure is the request's, never the ramp's; a cancel is recorded as the
        request's end (its row is written) and passed on."""
        n_out = self.plan.output_len if output_len is None else output_len  # a trace's request: its own
        try:
            if slots is None:
                await client.generate(prompt, n_out, o)
            else:
                async with slots:
                    await client.generate(prompt, n_out, o)
        except asyncio.CancelledError:
            o.status, o.error = "cancelled", cancelled_why
            self._finished(level, arm, o)
            raise
        except Exception as e:  # never let one request end the ramp
            o.status, o.error = "error", f"{type(e).__name__}: {e}"[:200]
        level.done[arm] += 1

    def _skipped(self, level: _LevelState, stop: asyncio.Event, tasks: list[asyncio.Task]) -> bool:
        """`n` (skip_level) was asked: the level stops now, what it holds cancelled."""
        if not self._skip.is_set():
            return False
        level.t_stop = clock.wall()
        stop.set()
        for t in tasks:
            t.cancel()
        return True
