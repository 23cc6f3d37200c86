"""What an operation asks its driver to do, and the descriptor that turns operations into methods.

Every public operation is written once, in :mod:`memfleet._ops`, as a generator that yields steps
and returns its result. :class:`memfleet.Client` runs those generators with blocking sockets and
:class:`memfleet.AsyncClient` with asyncio; the operations themselves do no I/O. A step's outcome
is sent back into the generator, and a failure is thrown into it at the ``yield``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Generator
from typing import TYPE_CHECKING, Any, Callable, Generic, TypeVar, overload

from ._proto import Parser
from ._router import ServerBase

if TYPE_CHECKING:
    from typing_extensions import Concatenate, ParamSpec

    from .aio import AsyncClient
    from .client import Client
else:
    try:
        from typing import ParamSpec
    except ImportError:  # Python 3.9: only type checkers look at it
        ParamSpec = TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class Call:
    """Send one request to ``server`` and parse its reply; the step's outcome is the parsed reply.

    ``build(meta)`` makes the request for the server's protocol; with ``value`` it makes only the
    command line, and the driver sends the value and its CRLF after it without copying them.
    Fails with :class:`MemfleetConnectionError` (the server's failure is counted) or
    :class:`MemfleetServerError`.
    """

    __slots__ = ("server", "build", "parse", "value")

    def __init__(
        self,
        server: ServerBase[Any],
        build: Callable[[bool], bytes],
        parse: Callable[[bool], Parser],
        value: bytes | None = None,
    ) -> None:
        self.server = server
        self.build = build
        self.parse = parse
        self.value = value


class Round:
    """Several calls at once, each to a different server: every request is sent before any reply
    is read. The outcome is a list, in order, of each call's result or the exception it raised."""

    __slots__ = ("calls",)

    def __init__(self, calls: list[Call]) -> None:
        self.calls = calls


class Connect:
    """Make sure ``server``'s protocol is known (its first connection probes it); outcome None."""

    __slots__ = ("server",)

    def __init__(self, server: ServerBase[Any]) -> None:
        self.server = server


class Sleep:
    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


class Load:
    """Run the user's loader; the asyncio driver also awaits what it returns if that is awaitable."""

    __slots__ = ("loader",)

    def __init__(self, loader: Callable[[], Any]) -> None:
        self.loader = loader


Step = Any  # Call | Round | Connect | Sleep | Load
Op = Generator[Step, Any, R]


class Operation(Generic[P, R]):
    """A public method written once as a generator of steps.

    Read on a client, it becomes that client's method: :class:`Client` runs the generator to the
    end and returns the result, :class:`AsyncClient` returns a coroutine. The bound method is
    stored on the instance at first use, so later calls cost a plain attribute lookup.
    """

    def __init__(self, op: Callable[Concatenate[Any, P], Op[R]]) -> None:
        self.op = op
        self.name = op.__name__
        params = list(inspect.signature(op).parameters.values())[1:]
        self.signature = inspect.Signature(params)
        self.__doc__ = op.__doc__
        self.__wrapped__ = op

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> Operation[P, R]: ...
    @overload
    def __get__(self, obj: Client, owner: type) -> Callable[P, R]: ...
    @overload
    def __get__(self, obj: AsyncClient, owner: type) -> Callable[P, Awaitable[R]]: ...
    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self
        method = obj._bind(self.op)
        method.__name__ = self.name
        method.__qualname__ = f"{type(obj).__name__}.{self.name}"
        method.__doc__ = self.op.__doc__
        method.__signature__ = self.signature
        obj.__dict__[self.name] = method
        return method


def operation(op: Callable[Concatenate[Any, P], Op[R]]) -> Operation[P, R]:
    return Operation(op)
