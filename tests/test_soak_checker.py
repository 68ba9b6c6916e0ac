"""The soak's history checker, on hand-made histories: one that is clean, and one per property
that breaks it, so that every property is shown to be caught (and nothing else is reported)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.soak.checker import Checker, check, percentile
from tests.soak.history import Record, Recorder, read_history

NODES = ["a", "b", "c"]
METHOD = {"queued": "workload:submitted", "running": "workload:started",
          "completed": "workload:completed"}  # fmt: skip


def info(origin: str, wid: str, seq: int, state: str = "queued", run: str = "") -> dict[str, Any]:
    return {
        "id": wid,
        "model": "m",
        "engine": "vllm",
        "runId": run or f"run-{origin}",
        "state": state,
        "originatedFrom": origin,
        "createdAt": 1,
        "startedAt": None,
        "completedAt": None,
        "error": None,
        "seq": seq,
    }


class H:
    """A hand-made history, built in time order."""

    def __init__(self, bound: float = 5.0) -> None:
        self.t = 0.0
        self.records: list[Record] = [Record(0.0, "start", data={"nodes": NODES, "bound": bound,
                                                                  "seed": 7})]  # fmt: skip

    def at(self, dt: float = 0.1) -> float:
        self.t += dt
        return self.t

    def report(self, origin: str, wid: str, seq: int, state: str = "queued") -> dict[str, Any]:
        wi = info(origin, wid, seq, state)
        frame = {"jsonrpc": "2.0", "method": METHOD[state], "params": {"workloadInfo": wi},
                 "id": f"{origin}-{seq}"}  # fmt: skip
        self.records.append(Record(self.at(), "send", origin, 1, frame))
        return wi

    def remove(self, origin: str, wid: str, run: str | None = None) -> None:
        params: dict[str, Any] = {"workloadId": wid, "originatedFrom": origin}
        if run:
            params["runId"] = run
        frame = {"jsonrpc": "2.0", "method": "workloads:remove", "params": params}
        self.records.append(Record(self.at(), "send", origin, 1, frame))

    def upsert(self, node: str, wi: dict[str, Any], inc: int = 1) -> None:
        frame = {"jsonrpc": "2.0", "method": "workloads:upsert", "params": {"workloadInfo": wi}}
        self.records.append(Record(self.at(), "recv", node, inc, frame))

    def removal(self, node: str, origin: str, wid: str, run: str | None = None) -> None:
        params: dict[str, Any] = {"workloadId": wid, "originatedFrom": origin}
        if run:
            params["runId"] = run
        frame = {"jsonrpc": "2.0", "method": "workloads:remove", "params": params}
        self.records.append(Record(self.at(), "recv", node, 1, frame))

    def mark(self, kind: Any, node: str = "", inc: int = 0, **data: Any) -> None:
        self.records.append(Record(self.at(), kind, node, inc, data))


def converged_history() -> H:
    """a reports w1 (queued → running) and w2 (removed); b and c hear all of it; b's process
    restarts and hears w1 again (a repeat across a restart is allowed)."""
    h = H()
    w1 = h.report("a", "1", 1)
    for n in ("b", "c"):
        h.upsert(n, w1)
    h.mark("fault", fault="kill", phase="begin", targets=["b"])
    h.mark("spawn", "b", 2)
    w1b = h.report("a", "1", 2, "running")
    w2 = h.report("a", "2", 1)
    h.upsert("b", w1, inc=2)
    for n in ("b", "c"):
        h.upsert(n, w1b, inc=2 if n == "b" else 1)
        h.upsert(n, w2, inc=2 if n == "b" else 1)
    h.mark("fault", fault="kill", phase="end", targets=["b"])
    h.remove("a", "2", "run-a")
    h.mark("quiesce")
    for n in ("b", "c"):
        h.removal(n, "a", "2", "run-a")
    h.mark("rss", "a", 1, kib=50_000)
    h.mark("rss", "a", 2, kib=70_000)
    h.mark("end")
    return h


def test_a_clean_history_has_no_violations_and_its_figures() -> None:
    report = check(converged_history().records)
    assert report.ok, report.summary()
    assert report.seed == 7
    assert report.faults == {"kill": 1}
    assert report.events == 4  # three lifecycle events and one removal
    assert report.restarts == {"b": 1}
    assert report.final_workloads == 1
    assert report.peak_rss_kib == {"a": 70_000}
    # w1@1, w1@2, w2@1 and the removal each reached both b and c.
    assert len(report.event_latencies) == 4 and report.never_converged_events == 0
    assert set(report.convergence) == {"a", "b", "c"}
    assert all(0.0 <= v <= 0.25 for v in report.convergence.values()), report.convergence


def test_seq_moving_backwards_is_caught() -> None:
    h = H()
    w1 = h.report("a", "1", 1)
    w2 = h.report("a", "1", 2, "running")
    h.mark("quiesce")
    for n in ("b", "c"):
        h.upsert(n, w2)
    h.upsert("b", w1, inc=2)  # even from a new process, lower than what b was told
    report = check(h.records)
    assert dict(report.violation_counts) == {"seq-backwards": 1}, report.summary()
    assert report.violations[0].node == "b"


def test_a_duplicate_from_one_process_is_caught() -> None:
    h = H()
    w1 = h.report("a", "1", 1)
    h.mark("quiesce")
    for n in ("b", "c"):
        h.upsert(n, w1)
    h.upsert("c", w1)
    assert dict(check(h.records).violation_counts) == {"duplicate": 1}


def test_a_removed_workload_that_comes_back_is_caught() -> None:
    h = H()
    w1 = h.report("a", "1", 1)
    w1b = h.report("a", "1", 2, "running")
    h.remove("a", "1")  # without runId: every run of ("a", "1") the broker holds
    h.mark("quiesce")
    for n in ("b", "c"):
        h.upsert(n, w1)
        h.removal(n, "a", "1")
    h.upsert("c", w1b)  # a newer seq, but after the removal
    report = check(h.records)
    assert dict(report.violation_counts) == {"resurrected": 1}, report.summary()


def test_an_altered_invented_or_echoed_upsert_is_caught() -> None:
    h = H()
    w1 = h.report("a", "1", 1)
    h.mark("quiesce")
    h.upsert("b", {**w1, "model": "other"})  # altered
    h.upsert("c", info("a", "9", 1))  # never reported
    h.upsert("a", w1)  # an echo to its own broker
    report = check(h.records)
    assert report.violation_counts["altered"] == 3, report.summary()


def test_a_view_that_never_converges_is_caught() -> None:
    """The known bug: the origin dies while c is cut off; c never hears the newest state."""
    h = H()
    w1 = h.report("a", "1", 1)
    w1b = h.report("a", "1", 2, "running")
    h.remove("a", "1", "run-a")
    h.report("a", "2", 1)
    h.mark("quiesce")
    h.upsert("b", w1b)
    h.removal("b", "a", "1", "run-a")
    h.upsert("b", info("a", "2", 1))
    h.upsert("c", w1)  # c stays at seq 1 and never hears of the removal or of w2
    h.mark("end")
    report = check(h.records)
    assert dict(report.violation_counts) == {"not-converged": 1}, report.summary()
    v = report.violations[0]
    assert v.node == "c" and "1 missing, 0 wrong, 1 extra" in v.detail, v
    assert report.never_converged_events == 3  # w1@2, the removal and w2@1 never reached c


def test_convergence_slower_than_the_bound_is_caught() -> None:
    h = H(bound=1.0)
    w1 = h.report("a", "1", 1)
    h.mark("quiesce")
    h.upsert("b", w1)
    h.at(3.0)
    h.upsert("c", w1)
    report = check(h.records)
    assert dict(report.violation_counts) == {"slow-convergence": 1}, report.summary()
    assert report.convergence["c"] > 1.0


def test_a_run_that_ended_before_quiesce_is_incomplete() -> None:
    h = H()
    h.report("a", "1", 1)
    assert dict(check(h.records).violation_counts) == {"incomplete": 1}


def test_the_live_checker_sees_convergence_as_frames_arrive() -> None:
    h = converged_history()
    live = Checker()
    cut = next(i for i, r in enumerate(h.records) if r.kind == "quiesce")
    for rec in h.records[: cut + 1]:
        live.feed(rec)
    assert not live.converged()  # the removal of w2 has not reached b and c yet
    for rec in h.records[cut + 1 :]:
        live.feed(rec)
    assert live.converged()
    assert live.report().ok and live.report().ok  # report() does not change the checker


def test_a_history_file_round_trips(tmp_path: Path) -> None:
    rec = Recorder(tmp_path / "h.jsonl")
    for r in converged_history().records:
        rec.add(r.kind, r.node, r.inc, r.data)
    rec.close()
    back = list(read_history(tmp_path / "h.jsonl"))
    assert [(r.kind, r.node, r.inc, r.data) for r in back] == [
        (r.kind, r.node, r.inc, r.data) for r in converged_history().records
    ]
    assert check(back).ok


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([], 50) == 0.0


# -- multi-path runs (issue 24) ------------------------------------------------------------------


class Multi(H):
    """A multi-path history: reports may go through another broker than the origin's, and a
    broker's own report counts once its answer is read."""

    def __init__(self, bound: float = 5.0) -> None:
        super().__init__(bound)
        self.records[0] = Record(0.0, "start", data={"nodes": NODES, "bound": bound, "seed": 7,
                                                     "paths": "multi"})  # fmt: skip

    def report_via(self, via: str, origin: str, wid: str, seq: int, state: str = "queued",
                   ) -> tuple[dict[str, Any], str]:  # fmt: skip
        wi = {**info(origin, wid, seq, state), "scheduledOn": via}
        rid = f"{origin}-{wid}-{seq}"
        frame = {"jsonrpc": "2.0", "method": METHOD[state], "params": {"workloadInfo": wi},
                 "id": rid}  # fmt: skip
        self.records.append(Record(self.at(), "send", via, 1, frame))
        return wi, rid

    def remove_via(self, via: str, origin: str, wid: str, run: str) -> str:
        rid = f"{origin}-rm-{wid}"
        params = {"workloadId": wid, "originatedFrom": origin, "runId": run}
        frame = {"jsonrpc": "2.0", "method": "workloads:remove", "params": params, "id": rid}
        self.records.append(Record(self.at(), "send", via, 1, frame))
        return rid

    def answer(self, node: str, rid: str, inc: int = 1) -> None:
        frame = {"jsonrpc": "2.0", "id": rid, "result": {"outcome": "applied"}}
        self.records.append(Record(self.at(), "recv", node, inc, frame))


def multi_path_history() -> tuple[Multi, dict[str, Any], dict[str, Any]]:
    """w1 enters on a (queued, answered) and runs on c (started, answered); b hears both, a
    hears c's start, c hears a's submission."""
    h = Multi()
    w1, r1 = h.report_via("a", "a", "1", 1)
    h.answer("a", r1)
    h.upsert("b", w1)
    h.upsert("c", w1)
    w1b, r2 = h.report_via("c", "a", "1", 2, "running")
    h.answer("c", r2)
    h.upsert("b", w1b)
    h.upsert("a", w1b)  # its own workload, reported by another broker: not an echo
    return h, w1, w1b


def test_a_clean_multi_path_history_converges_with_the_brokers_own_reports() -> None:
    h, _, _ = multi_path_history()
    h.mark("quiesce")
    h.mark("end")
    report = check(h.records)
    assert report.ok, report.summary()
    assert set(report.convergence) == {"a", "b", "c"}


def test_an_upsert_older_than_the_brokers_applied_report_is_backwards() -> None:
    """The issue's case: c's own start (seq 2) was answered, then its restarted node forwards
    a's snapshot of the queued event (seq 1)."""
    h, w1, _ = multi_path_history()
    h.mark("spawn", "c", 2)
    h.upsert("c", w1, inc=2)
    h.mark("quiesce")
    report = check(h.records)
    assert dict(report.violation_counts) == {"seq-backwards": 1}, report.summary()
    assert report.violations[0].node == "c" and "its own seq 2" in report.violations[0].detail


def test_an_upsert_read_while_the_brokers_report_is_in_flight_judges_nothing() -> None:
    """Read before the answer: the node had not applied the report yet, so the lower seq was
    on its way first (the order of frames on stdout, not the clock)."""
    h = Multi()
    w1, r1 = h.report_via("a", "a", "1", 1)
    h.answer("a", r1)
    w1b, r2 = h.report_via("c", "a", "1", 2, "running")
    h.upsert("c", w1)  # queued before c's report was applied: read before its answer
    h.answer("c", r2)
    h.upsert("a", w1b)
    h.upsert("b", w1)
    h.upsert("b", w1b)
    h.mark("quiesce")
    report = check(h.records)
    assert report.ok, report.summary()


def test_an_upsert_after_the_brokers_own_removal_was_applied_is_resurrected() -> None:
    h, _, w1b = multi_path_history()
    rid = h.remove_via("a", "a", "1", "run-a")
    h.answer("a", rid)
    h.upsert("a", w1b, inc=2)  # a restarted a forwards c's snapshot of the removed workload
    h.mark("quiesce")
    report = check(h.records)
    assert report.violation_counts["resurrected"] == 1, report.summary()


def test_in_a_multi_path_run_an_echo_is_an_upsert_of_the_brokers_own_report() -> None:
    h, _, w1b = multi_path_history()
    h.upsert("c", w1b)  # c reported seq 2 itself
    report = check(h.records)
    assert report.violation_counts["altered"] == 1, report.summary()
    assert "echo" in report.violations[0].detail
