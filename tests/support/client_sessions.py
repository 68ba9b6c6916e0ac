"""The client sessions under test, connected to h2's server side (the peer), and what their events
say."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import h2.settings

from nvpair_wm.proto.exchanges import (
    ClientEvent,
    RequestFailed,
    ResponseReceived,
    SessionChanged,
)
from nvpair_wm.proto.h2.client import H2ClientSession

PATH = "/v1/workloads/events"
AUTHORITY = b"10.0.0.2:14320"
MIB = 1024 * 1024


class Server:
    """h2's server side, the peer of the session under test."""

    def __init__(self, **settings: int) -> None:
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self.h2 = h2.connection.H2Connection(config)
        self.h2.initiate_connection()
        if settings:
            self.h2.update_settings(
                {getattr(h2.settings.SettingCodes, k): v for k, v in settings.items()}
            )
        self.events: list[h2.events.Event] = []
        self.bodies: dict[int, bytes] = {}
        self.headers: dict[int, dict[bytes, bytes]] = {}

    def take(self, client: H2ClientSession) -> list[h2.events.Event]:
        """Receive what the client wrote; acknowledge DATA as an application would."""
        got = self.h2.receive_data(client.data_to_send())
        for ev in got:
            if isinstance(ev, h2.events.RequestReceived):
                self.headers[ev.stream_id] = dict(ev.headers)
                self.bodies.setdefault(ev.stream_id, b"")
            elif isinstance(ev, h2.events.DataReceived):
                self.bodies[ev.stream_id] = self.bodies.get(ev.stream_id, b"") + ev.data
                self.h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        self.events += got
        return got

    def respond(self, sid: int, status: int = 202, body: bytes = b"") -> None:
        head = [(b":status", str(status).encode()), (b"content-length", str(len(body)).encode())]
        self.h2.send_headers(sid, head, end_stream=not body)
        if body:
            self.h2.send_data(sid, body, end_stream=True)

    def out(self) -> bytes:
        return self.h2.data_to_send()


def connected(**settings: int) -> tuple[H2ClientSession, Server]:
    client = H2ClientSession(AUTHORITY, MIB)
    server = Server(**settings)
    server.take(client)  # preface + SETTINGS
    events = client.receive_data(server.out(), 0.0)  # server SETTINGS (+ ACK)
    assert SessionChanged() in events
    server.take(client)  # client's SETTINGS ACK
    return client, server


def responses(events: list[ClientEvent]) -> dict[int, int]:
    return {e.request: e.response.status for e in events if isinstance(e, ResponseReceived)}


def failures(events: list[ClientEvent]) -> dict[int, type[Exception]]:
    return {e.request: type(e.error) for e in events if isinstance(e, RequestFailed)}
