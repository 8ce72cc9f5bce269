"""One registry helper for every name -> object table of the package (rules, engines, tasks...)."""
from __future__ import annotations

import importlib
from typing import Callable, Generic, Iterator, NamedTuple, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A name -> object table that refuses a second entry under a name and lists the names it
    has when asked for one it lacks. `kind` names the entries in errors ("selection rule")."""

    def __init__(self, kind: str, entries: dict[str, T] | None = None):
        self.kind = kind
        self._entries: dict[str, T] = {}
        for name, obj in (entries or {}).items():
            self.add(name, obj)

    def add(self, name: str, obj: T) -> T:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = obj
        return obj

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of `add`."""
        return lambda obj: self.add(name, obj)

    def __getitem__(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; choose from {', '.join(sorted(self._entries))}") from None

    __setitem__ = add  # `REGISTRY[name] = obj` refuses a taken name too

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def get(self, name: str, default=None):
        return self._entries.get(name, default)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        return list(self._entries)

    def items(self):
        return self._entries.items()

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._entries)})"


class EngineEntry(NamedTuple):
    """A registered engine as import paths (rollout and update engines): checking a config's options
    imports the option view only, never the engine and its libraries (a study resolves every run's
    config when it is read)."""

    engine: str                 # "module:Class" of the engine
    options: str | None = None  # "module:Class" of its option view; None: it reads no field of its own


def load(path: str):
    """The object at "module:name"."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)
