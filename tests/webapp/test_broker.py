"""The embedded broker takes messages in the order they were sent, also those sent within one millisecond (an
experiment's runs, queued together as its transaction commits): kombu's own filesystem transport names them by the
millisecond and a random uuid, and took such messages in random order."""

from __future__ import annotations

from typing import Any

from kombu import Connection

from webapp.config.broker import Transport


def send_and_receive(tmp_path: Any, transport: Any, count: int) -> list[int]:
    folder = tmp_path / "queue"
    folder.mkdir()
    options = {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "control_folder": str(tmp_path / "control"),  # kombu's default is ./control, in the working directory
        "store_processed": False,
    }
    with Connection("filesystem://", transport=transport, transport_options=options) as connection:
        queue = connection.SimpleQueue("cpu")
        for number in range(count):
            queue.put({"n": number})
        received = [queue.get(timeout=1).payload["n"] for _ in range(count)]
        queue.close()
    assert not [name for name in folder.iterdir() if name.name.endswith(".tmp")]
    return received


def test_messages_sent_within_a_millisecond_are_taken_in_the_order_they_were_sent(tmp_path):
    assert send_and_receive(tmp_path, Transport, 200) == list(range(200))


def test_the_embedded_broker_uses_the_ordered_transport(settings):
    from webapp.config.celery import app

    if settings.CELERY_BROKER_URL == "filesystem://":
        with app.connection_for_write() as connection:
            assert connection.transport_cls == "webapp.config.broker:Transport"
            assert connection.get_transport_cls() is Transport
