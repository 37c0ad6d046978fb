"""The embedded broker's transport: kombu's filesystem transport, with messages taken in the order they were sent.

Kombu names a message file by the millisecond it was sent and a random uuid, and a worker takes the files in name
order: messages sent within one millisecond — an experiment's runs, queued together as its transaction commits —
came out in random order, so a 2 × 2 experiment could train static s0, static s1, inspo s0, inspo s1 and leave its
first verdict waiting for the third run. Here a name starts with the nanosecond and a per-process sequence number,
so one process's messages are taken in the order it sent them (and those of several processes by the clock), and the
file appears whole under its name (written aside, then renamed) so a worker never reads half of one.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import uuid
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

_sequence = itertools.count()
_sequence_lock = threading.Lock()


def message_name(queue: str) -> str:
    """A message file's name: it sorts after every name this process made before it, and by the clock against other
    processes' (`<ns>-<sequence>_<uuid>.<queue>.msg`, kombu's `<first part>.<queue>.msg` shape).

    >>> first, second = message_name("cpu"), message_name("cpu")
    >>> first < second and first.partition(".")[2] == "cpu.msg"
    True
    """
    with _sequence_lock:
        number = next(_sequence)
        now = time.monotonic_ns()
    return f"{now:020d}-{number:012d}_{uuid.uuid4()}.{queue}.msg"


class Channel(filesystem.Channel):
    def _put(self, queue: Any, message: Any, **kwargs: Any) -> None:  # type: ignore[override]  # kombu passes kwargs
        """Put `message` onto `queue`: written under a name no worker takes, then renamed to its message name."""
        name = message_name(str(queue))
        final = os.path.join(self.data_folder_out, name)
        partial = os.path.join(self.data_folder_out, f"partial-{name}.tmp")
        try:
            with open(partial, "wb", buffering=0) as file:
                file.write(str_to_bytes(dumps(message)))  # type: ignore[no-untyped-call]  # kombu's JSON, untyped
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    """kombu's filesystem transport with `Channel`'s ordered message names."""

    Channel = Channel

    @property
    def default_connection_params(self) -> dict[str, Any]:
        """No default host: a folder of messages has none, and kombu logged a WARNING on every worker start that it
        reverted to 'localhost' (a clean run's log has none, docs/platform.md)."""
        return {"port": self.default_port}
