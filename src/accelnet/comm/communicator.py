"""Communicators: an ordered group of devices (ranks) and its routes over the fabric."""

from __future__ import annotations

from collections.abc import Sequence

from accelnet.fabric import Fabric, Route


class CommError(ValueError):
    """A communicator or collective that cannot be built; the message names what is wrong."""


class Communicator:
    """An ordered group of distinct devices of one fabric: rank ``i`` is ``ranks[i]``.

    Rank order matters: ring algorithms pass data from rank ``i`` to rank ``i + 1``. Routes
    are the fabric's (bottleneck bandwidth, summed latency) and are cached. Immutable; cheap
    to copy with another order (:meth:`reordered`).
    """

    def __init__(self, fabric: Fabric, devices: Sequence[str]) -> None:
        if not devices:
            raise CommError("a communicator needs at least one device")
        ranks: list[str] = []
        for ref in devices:
            try:
                dev = fabric.device(ref)
            except KeyError as e:
                raise CommError(str(e.args[0])) from None
            if dev.id in ranks:
                raise CommError(f"device {dev.id!r} appears twice in the communicator")
            ranks.append(dev.id)
        self.fabric = fabric
        self.ranks: tuple[str, ...] = tuple(ranks)
        self._routes: dict[tuple[int, int], Route] = {}

    @property
    def size(self) -> int:
        """Number of ranks."""
        return len(self.ranks)

    def route(self, i: int, j: int) -> Route:
        """The route from rank ``i`` to rank ``j``."""
        key = (i, j)
        found = self._routes.get(key)
        if found is None:
            found = self._routes[key] = self.fabric.route(self.ranks[i], self.ranks[j])
        return found

    def hosts(self) -> tuple[tuple[int, ...], ...]:
        """Rank indices grouped by host: groups in the order their first rank appears,
        ranks in rank order inside each."""
        groups: dict[str, list[int]] = {}
        for i, dev in enumerate(self.ranks):
            groups.setdefault(self.fabric.devices[dev].host, []).append(i)
        return tuple(tuple(g) for g in groups.values())

    def reordered(self, order: Sequence[int]) -> Communicator:
        """The same devices with rank ``k`` taken from old rank ``order[k]``."""
        if sorted(order) != list(range(self.size)):
            raise CommError(f"order {list(order)} is not a permutation of 0..{self.size - 1}")
        return Communicator(self.fabric, [self.ranks[i] for i in order])

    def __repr__(self) -> str:
        return f"Communicator({self.fabric.name!r}, {list(self.ranks)})"
