"""Median wall time of callables: CUDA events on a GPU, perf_counter on the CPU."""
import statistics
import time
from typing import Callable, Dict, Hashable

import torch


def _time_once_ms(fn, device: str) -> float:
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def _warm_up(fns: Dict[Hashable, Callable], device: str, warmup: int) -> None:
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    if device == "cuda":
        torch.cuda.synchronize()


def median_ms_each(fns: Dict[Hashable, Callable], device: str, warmup: int = 3,
                   reps: int = 20) -> Dict[Hashable, float]:
    """The median time of each callable, timed in rounds of one call each, in turn: a drift of the
    device's speed during the run (clocks, temperature) then falls on all of them alike instead of
    on whichever is timed last (the same kernels can run a few percent slower after other timings
    than before)."""
    _warm_up(fns, device, warmup)
    times = {label: [] for label in fns}
    for _ in range(reps):
        for label, fn in fns.items():
            times[label].append(_time_once_ms(fn, device))
    return {label: statistics.median(t) for label, t in times.items()}


def queued_median_ms_each(fns: Dict[Hashable, Callable], device: str, warmup: int = 3,
                          reps: int = 20) -> Dict[Hashable, float]:
    """As median_ms_each, but with the calls queued back to back on the GPU (events around each
    call, one synchronisation at the end, as triton.testing.do_bench times): each call's time is
    then its GPU time wherever the host issues calls faster than the GPU runs them, as in a
    training or serving loop, while median_ms_each also counts the host's dispatch before the
    first kernel of a call made on an idle GPU. On the CPU: median_ms_each."""
    if device != "cuda":
        return median_ms_each(fns, device, warmup, reps)
    _warm_up(fns, device, warmup)
    events = {label: [] for label in fns}
    for _ in range(reps):
        for label, fn in fns.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            events[label].append((start, end))
    torch.cuda.synchronize()
    return {label: statistics.median(s.elapsed_time(e) for s, e in pairs) for label, pairs in events.items()}


def median_ms(fn, device: str, warmup: int = 3, reps: int = 20) -> float:
    return median_ms_each({"fn": fn}, device, warmup, reps)["fn"]
