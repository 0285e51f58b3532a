"""Small registries of pluggable parts, answering an unknown name with the valid ones."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from accelnet.fabric.catalog import UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """Name -> factory; :meth:`create` builds a part with keyword parameters."""

    def __init__(self, what: str, factories: Mapping[str, Callable[..., T]]) -> None:
        self.what = what
        self._factories = dict(factories)

    def create(self, name: str, **params: Any) -> T:
        """A new part; UnknownNameError listing the names, TypeError for bad parameters."""
        factory = self._factories.get(name)
        if factory is None:
            raise UnknownNameError(self.what, name, self._factories)
        return factory(**params)

    def __iter__(self) -> Iterator[str]:
        return iter(self._factories)

    def __contains__(self, name: object) -> bool:
        return name in self._factories
