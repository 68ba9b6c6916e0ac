"""The transition tables of the HTTP/2 client's streams and of both sessions' connections: their
properties (RFC 9113 §5.1 from the client's side, §6.8), the refusal of any other transition,
and the states the sessions walk through on the wire. (The server's stream table is tested in
``test_h2_server_machine``.)"""

from __future__ import annotations

import pytest
from h2.errors import ErrorCodes
from hyperframe.frame import GoAwayFrame, RstStreamFrame

from nvpair_wm.errors import LocalProtocolError
from nvpair_wm.http.core import Limits
from nvpair_wm.proto.h2 import H2ServerSession
from nvpair_wm.proto.h2.client import StreamEvent, StreamState, _Stream
from nvpair_wm.proto.h2.session import (
    CONNECTION_TRANSITIONS,
    ConnectionEvent,
    ConnectionState,
    step,
)
from tests.support.client_sessions import PATH, connected, responses
from tests.support.handlers import Recorder
from tests.support.raw_frames import frames_of
from tests.support.transitions import StepTrace, reachable

# -- the client's streams ------------------------------------------------------------------------


def _next(state: StreamState, event: StreamEvent) -> StreamState | None:
    """The state ``event`` moves a client stream in ``state`` to, or None when refused."""
    st = _Stream(1, 0.0, 1.0, b"", 0, 0)
    st.state = state
    try:
        return st.step(event)
    except LocalProtocolError as exc:
        assert st.state is state and "client stream 1" in str(exc)  # a refusal changes nothing
        return None


def test_client_stream_transition_table_is_rfc_9113_client_side() -> None:
    """§5.1 from the client's side: our END_STREAM once, the final response's HEADERS once,
    its END_STREAM once and only after them; CLOSED is where the response ended."""
    S, E = StreamState, StreamEvent
    assert reachable(S.OPEN, E, _next) == set(S)  # every state is reachable from a new stream
    for state in S:
        assert (_next(state, E.SEND_END_STREAM) is None) == (not state.body_to_send)
        assert (_next(state, E.RECV_RESPONSE) is None) == state.response_begun
        ends = _next(state, E.RECV_END_STREAM)
        assert (ends is None) == (not state.response_begun or state is S.CLOSED)
        assert ends in (None, S.CLOSED)
        for event in E:
            after = _next(state, event)
            if after is not None and after is not S.CLOSED:
                assert after.body_to_send == (state.body_to_send and event is not E.SEND_END_STREAM)
                assert after.response_begun == (state.response_begun or event is E.RECV_RESPONSE)
    assert [e for e in E if _next(S.CLOSED, e) is not None] == []


def test_client_stream_states_of_a_request_then_its_response(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trace = StepTrace(monkeypatch, _Stream)
    S, E = StreamState, StreamEvent
    client, server = connected()
    sid = client.start_request(PATH, b"[]", 0.0, 10.0)
    assert trace.steps == [(sid, S.OPEN, E.SEND_END_STREAM, S.HALF_CLOSED_LOCAL)]
    server.take(client)
    server.respond(sid, 200, b"{}")
    assert responses(client.receive_data(server.out(), 0.1)) == {sid: 200}
    assert trace.steps[1:] == [
        (sid, S.HALF_CLOSED_LOCAL, E.RECV_RESPONSE, S.HALF_CLOSED_LOCAL_RECEIVING),
        (sid, S.HALF_CLOSED_LOCAL_RECEIVING, E.RECV_END_STREAM, S.CLOSED),
    ]


def test_client_stream_states_of_an_early_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A body held back by a zero window, answered before it went out: the stream closes from
    OPEN_RECEIVING and the rest of the body is cancelled with RST_STREAM NO_ERROR (§8.1)."""
    trace = StepTrace(monkeypatch, _Stream)
    S, E = StreamState, StreamEvent
    client, server = connected(INITIAL_WINDOW_SIZE=0)
    sid = client.start_request(PATH, b"x" * 100, 0.0, 10.0)
    assert trace.steps == []  # OPEN: nothing of the body could go out
    server.take(client)
    server.respond(sid, 413)
    assert responses(client.receive_data(server.out(), 0.1)) == {sid: 413}
    assert trace.steps == [
        (sid, S.OPEN, E.RECV_RESPONSE, S.OPEN_RECEIVING),
        (sid, S.OPEN_RECEIVING, E.RECV_END_STREAM, S.CLOSED),
    ]
    [reset] = [f for f in frames_of(client.data_to_send()) if isinstance(f, RstStreamFrame)]
    assert reset.stream_id == sid and reset.error_code == ErrorCodes.NO_ERROR


# -- the connections -----------------------------------------------------------------------------


def test_connection_transition_table() -> None:
    """OPEN, DRAINING after a graceful GOAWAY (another may follow, §6.8), CLOSED at the end from
    either; CLOSED is final and nothing returns to OPEN."""
    C, V = ConnectionState, ConnectionEvent
    assert reachable(C.OPEN, V, lambda s, e: CONNECTION_TRANSITIONS.get((s, e))) == set(C)
    for state in (C.OPEN, C.DRAINING):
        assert CONNECTION_TRANSITIONS[state, V.END] is C.CLOSED
        assert CONNECTION_TRANSITIONS[state, V.GOAWAY] is C.DRAINING
    assert [e for e in V if (C.CLOSED, e) in CONNECTION_TRANSITIONS] == []
    assert C.OPEN not in CONNECTION_TRANSITIONS.values()


@pytest.mark.parametrize("event", list(ConnectionEvent))
def test_a_transition_out_of_closed_raises(event: ConnectionEvent) -> None:
    with pytest.raises(LocalProtocolError, match=f"HTTP/2 connection: {event.name} in state"):
        step(CONNECTION_TRANSITIONS, ConnectionState.CLOSED, event, "connection")


def test_server_connection_states_of_a_graceful_shutdown() -> None:
    C = ConnectionState
    server = H2ServerSession(Recorder(), Limits(), "fp", 0.0)
    seen = [(server.state, server.closed)]
    server.shutdown(1.0)
    seen.append((server.state, server.closed))
    server.shutdown(1.5)  # a second shutdown changes nothing
    seen.append((server.state, server.closed))
    wire = server.data_to_send()  # nothing in flight: the final GOAWAY follows the first
    seen.append((server.state, server.closed))
    assert seen == [(C.OPEN, False), (C.DRAINING, False), (C.DRAINING, False), (C.CLOSED, True)]
    assert len([f for f in frames_of(wire) if isinstance(f, GoAwayFrame)]) == 2
    server.receive_data(b"late bytes", 2.0)  # ignored once CLOSED: no transition is tried
    assert server.data_to_send() == b""


def test_server_connection_closes_on_eof_without_draining() -> None:
    server = H2ServerSession(Recorder(), Limits(), "fp", 0.0)
    server.receive_data(b"", 1.0)
    assert (server.state, server.closed) == (ConnectionState.CLOSED, True)


def test_client_connection_states_of_a_goaway_then_the_end() -> None:
    C = ConnectionState
    client, server = connected()
    sids = [client.start_request(PATH, b"[]", 0.0, 10.0) for _ in range(2)]
    server.take(client)
    seen = [(client.state, client.usable)]
    for last in (sids[1], sids[0]):  # a second GOAWAY lowers the last stream id
        client.receive_data(GoAwayFrame(0, last_stream_id=last).serialize(), 0.1)
        seen.append((client.state, client.usable))
    assert client.active == 1 and client.ended is None
    client.end("done", graceful=True)
    seen.append((client.state, client.usable))
    assert seen == [(C.OPEN, True), (C.DRAINING, False), (C.DRAINING, False), (C.CLOSED, False)]
    assert client.end("again", graceful=True) == [] and client.ended == "done"
