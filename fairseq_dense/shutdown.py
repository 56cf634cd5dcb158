"""Quiet interpreter exit for fairseq's background data prefetching.

fairseq's ``BufferedIterator`` (``--data-buffer-size``, default 10) fills a queue of
batches from a daemon ``BackgroundConsumer`` thread. When ``fairseq-train`` ends
while that thread is still collating a batch, Python 3.11 finalises the
interpreter under it: the thread, inside a torch tensor destructor that re-takes
the GIL, is terminated by ``pthread_exit`` through a ``noexcept`` C++ frame and
the whole process aborts ("terminate called without an active exception", exit
code 134) after training has finished and every checkpoint is written. Small,
fast models hit it reliably (their last epoch ends while the buffer refills).

:func:`quiesce_prefetch_threads` runs at exit (registered by ``import
fairseq_dense``) and waits, with a bound, until every such thread is either
finished or blocked on its full queue: a thread parked in ``queue.put`` waits
on a plain lock and is never resumed, so finalisation cannot catch it inside a
destructor.
"""
import atexit
import threading
import time

WAIT_SECONDS = 30.0


def _prefetch_threads():
    try:
        from fairseq.data.iterators import BackgroundConsumer
    except ImportError:  # fairseq not importable: nothing of it is running
        return []
    return [t for t in threading.enumerate() if isinstance(t, BackgroundConsumer)]


def _parked(thread) -> bool:
    """The thread is blocked in ``queue.put`` on its full queue (it is the only producer).

    ``queue.full()`` alone is not enough: right after the put that filled the queue
    the thread still collates one more batch before it blocks.
    """
    # A waiter on ``not_full`` exists only while a put blocks on a full queue; the
    # length of that deque is read atomically under the GIL, without q.mutex.
    return len(thread._queue.not_full._waiters) > 0


def quiesce_prefetch_threads(timeout: float = WAIT_SECONDS, threads=None) -> bool:
    """Wait until fairseq's prefetch threads (default: all) are done or parked; True when they are."""
    deadline = time.monotonic() + timeout
    busy = _prefetch_threads() if threads is None else list(threads)
    while busy and time.monotonic() < deadline:
        busy = [t for t in busy if t.is_alive() and not _parked(t)]
        if busy:
            time.sleep(0.01)
    return not busy


atexit.register(quiesce_prefetch_threads)
