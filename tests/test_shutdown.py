"""fairseq's prefetch threads are parked before interpreter exit (fairseq_dense.fairseq_internals)."""

import threading
import time

from fairseq.data.iterators import BufferedIterator

from fairseq_dense import fairseq_internals


class SlowSource:
    """An iterable whose items take a while to produce, like collating batches."""

    def __init__(self, n: int, delay: float):
        self.n, self.delay = n, delay

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in range(self.n):
            time.sleep(self.delay)
            yield i


class GatedSource:
    """Yields 0, then waits for ``gate`` before yielding 1: the producer thread is
    certainly alive until the test opens the gate (no race with a fast finish)."""

    def __init__(self):
        self.gate = threading.Event()

    def __len__(self):
        return 2

    def __iter__(self):
        yield 0
        assert self.gate.wait(30)
        yield 1


def consumer(itr: BufferedIterator):
    (thread,) = [t for t in fairseq_internals.prefetch_threads() if t._queue is itr._queue]
    return thread


def test_quiesce_waits_until_the_producer_is_parked():
    itr = BufferedIterator(3, SlowSource(50, 0.05))
    assert next(itr) == 0
    thread = consumer(itr)
    assert not fairseq_internals.parked(thread)  # still producing right after the first batch
    assert fairseq_internals.quiesce_prefetch_threads(timeout=30, threads=[thread])
    assert thread.is_alive() and fairseq_internals.parked(thread) and itr._queue.full()
    assert [next(itr) for _ in range(3)] == [1, 2, 3]  # parked, not broken


def test_quiesce_gives_up_after_its_timeout():
    itr = BufferedIterator(10, SlowSource(20, 0.5))
    next(itr)
    start = time.monotonic()
    assert not fairseq_internals.quiesce_prefetch_threads(timeout=0.2, threads=[consumer(itr)])
    assert time.monotonic() - start < 5


def test_finished_threads_count_as_quiet():
    source = GatedSource()
    itr = BufferedIterator(10, source)
    next(itr)
    thread = consumer(itr)
    source.gate.set()
    assert list(itr) == [1]
    thread.join(5)
    assert fairseq_internals.quiesce_prefetch_threads(timeout=5, threads=[thread])
