"""State machines as one transition table each, with a recorded history.

Pure: the caller passes the time and the cause of every transition. An illegal transition
raises :class:`IllegalTransitionError` naming the entity, both states and the allowed ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Generic, TypeVar

S = TypeVar("S", bound=StrEnum)


class IllegalTransitionError(ValueError):
    """A transition the table does not allow."""


@dataclass(frozen=True, slots=True)
class Transition(Generic[S]):
    """One recorded change of state."""

    at: float
    src: S
    dst: S
    cause: str


class TransitionTable(Generic[S]):
    """The allowed transitions of one state machine, each with a comment saying why.

    ``rows[src][dst]`` is the comment of the transition ``src -> dst``; a missing entry is
    an illegal transition.
    """

    def __init__(self, name: str, rows: Mapping[S, Mapping[S, str]]) -> None:
        self.name = name
        self._rows = MappingProxyType({k: MappingProxyType(dict(v)) for k, v in rows.items()})

    def allowed(self, src: S, dst: S) -> bool:
        """Whether ``src -> dst`` is in the table."""
        return dst in self._rows.get(src, {})

    def targets(self, src: S) -> tuple[S, ...]:
        """States reachable from ``src`` in one step."""
        return tuple(self._rows.get(src, {}))

    def why(self, src: S, dst: S) -> str:
        """The table's comment for ``src -> dst``."""
        return self._rows[src][dst]

    def check(self, what: str, src: S, dst: S) -> None:
        """Raise :class:`IllegalTransitionError` unless ``src -> dst`` is allowed."""
        if not self.allowed(src, dst):
            allowed = ", ".join(t.value for t in self.targets(src)) or "nothing (final)"
            raise IllegalTransitionError(
                f"{self.name} {what}: {src.value} -> {dst.value} is not allowed; "
                f"from {src.value} it may go to {allowed}"
            )

    @property
    def rows(self) -> Mapping[S, Mapping[S, str]]:
        """The whole table."""
        return self._rows


HISTORY = 32  # transitions a Tracked keeps in memory (the store's event log keeps all)


@dataclass(frozen=True, slots=True)
class Tracked(Generic[S]):
    """A current state and the last :data:`HISTORY` transitions that led to it (a device
    lives for months: its whole history belongs in the store, not in every copy)."""

    state: S
    history: tuple[Transition[S], ...] = ()

    def to(self, table: TransitionTable[S], what: str, dst: S, at: float, cause: str) -> Tracked[S]:
        """The entity after ``state -> dst``; raises IllegalTransitionError if not allowed."""
        table.check(what, self.state, dst)
        kept = self.history[-(HISTORY - 1) :] if len(self.history) >= HISTORY else self.history
        return Tracked(dst, (*kept, Transition(at, self.state, dst, cause)))
