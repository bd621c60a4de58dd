"""The allocator's memory history, read without a GPU: synthetic traces in the shape
`torch.cuda.memory._snapshot()["device_traces"][0]` has (entries oldest first, frames innermost
first), for the timeline and for the script lines alive at the peak."""

from __future__ import annotations

from memlint.verify import history

SCRIPT = "/work/train.py"
T0 = 1_700_000_000.0


def frames(*lines, inner="torch/nn/modules/linear.py"):
    """An allocation's Python stack: a torch frame, then the script's frames, innermost first."""
    return [{"filename": inner, "line": 125, "name": "forward"}] + [
        {"filename": SCRIPT, "line": line, "name": "main"} for line in lines]


def alloc(addr, size, *lines, at=0.0):
    return {"action": "alloc", "addr": addr, "size": size, "time_us": int((T0 + at) * 1e6), "frames": frames(*lines)}


def free(addr, size, at=0.0):
    return [{"action": "free_requested", "addr": addr, "size": size, "time_us": int((T0 + at) * 1e6)},
            {"action": "free_completed", "addr": addr, "size": size, "time_us": int((T0 + at) * 1e6)}]


def test_timeline_is_anchored_on_the_allocator_and_thinned():
    trace = [alloc(1, 100, 10, at=0.1),
             {"action": "segment_alloc", "addr": 0, "size": 4096, "time_us": int((T0 + 0.1) * 1e6)},
             alloc(2, 100, 11, at=0.2), *free(2, 100, at=0.3)]
    points = history.timeline(trace, 150, T0)
    assert [round(t, 3) for t, _ in points] == [0.1, 0.2, 0.3]
    assert [b for _, b in points] == [150, 250, 150]  # 50 bytes were allocated before the history began
    many = [[float(i), i % 7] for i in range(20000)]
    thinned = history.thin(many)
    assert len(thinned) == history.TIMELINE_POINTS and max(b for _, b in thinned) == 6


def test_peak_names_the_innermost_script_line_of_what_is_alive_at_the_peak():
    # line 12 allocates inside a helper called from line 30; line 20's tensor is freed before the peak
    trace = [alloc(1, 100, 10), alloc(2, 40, 20), *free(2, 40), alloc(3, 300, 12, 30),
             *free(1, 100), alloc(4, 50, 14)]
    found = history.peak(trace, SCRIPT, allocated_now=350)
    assert found["bytes"] == 400 and found["unattributed"] == 0
    assert [(line["line"], line["bytes"]) for line in found["lines"]] == [(12, 300), (10, 100)]
    assert found["lines"][0] == {"file": SCRIPT, "line": 12, "function": "main", "bytes": 300}


def test_peak_keeps_only_the_largest_lines_and_groups_allocations_of_one_line():
    trace = [alloc(addr, 10 * addr, addr % 7 + 1) for addr in range(1, 15)]
    found = history.peak(trace, SCRIPT, allocated_now=sum(10 * a for a in range(1, 15)), top=3)
    assert len(found["lines"]) == 3
    by_line = {}
    for addr in range(1, 15):
        by_line[addr % 7 + 1] = by_line.get(addr % 7 + 1, 0) + 10 * addr
    assert [(x["line"], x["bytes"]) for x in found["lines"]] == sorted(by_line.items(), key=lambda i: -i[1])[:3]


def test_memory_from_outside_the_script_and_from_before_the_history():
    thread = [{"filename": "threading.py", "line": 1, "name": "run"}]
    other = {"action": "alloc", "addr": 9, "size": 70, "frames": thread}
    backward = {"action": "alloc", "addr": 8, "size": 120, "frames": []}  # the autograd thread: no Python
    # the history lost the allocations of addr 5 (64 bytes, freed in it) and of 200 bytes still alive
    trace = [alloc(1, 100, 10), other, backward, *free(5, 64), alloc(2, 90, 11)]
    found = history.peak(trace, SCRIPT, allocated_now=580)
    assert found["bytes"] == 580
    assert [(x["file"], x["line"], x["bytes"]) for x in found["lines"]] == \
        [(history.NO_PYTHON, 0, 120), (SCRIPT, 10, 100), (SCRIPT, 11, 90), (history.OTHER, 0, 70)]
    assert found["unattributed"] == 200
    early = history.peak(trace[:2] + free(5, 64), SCRIPT, allocated_now=370)  # the peak before the free
    assert early["bytes"] == 370 + 64 and early["unattributed"] == 264


def test_a_trace_that_allocates_nothing_has_no_peak():
    assert history.peak([], SCRIPT, 0) is None
    assert history.peak([{"action": "snapshot"}], SCRIPT, 0) is None
