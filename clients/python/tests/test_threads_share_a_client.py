"""One Client shared by many threads doing every kind of call at once, while its managed
dictionaries train and publish. With the GIL (and on free-threaded CPython, where
``scripts/test-free-threaded`` runs this without it) no value may cross to another key, no
increment may be lost and nothing may raise."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from client_support import Server

import memfleet

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from samples import small_profile  # noqa: E402

THREADS = 8
ROUNDS = 150


def test_threads_share_one_client_over_three_servers(servers3: list[Server]) -> None:
    c = memfleet.Client(
        [s.address for s in servers3],
        max_pool_size=4,
        managed_dicts=memfleet.ManagedDicts(min_samples=100, refresh_interval=0.05),
    )
    c.set("shared:hits", 0)
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def work(n: int) -> None:
        try:
            start.wait()
            mine = [f"user:{n}-{i}:profile" for i in range(ROUNDS)]
            for i, key in enumerate(mine):
                record = small_profile(n * 1000 + i)
                assert c.set(key, record)
                assert c.get(key) == record
                assert c.incr("shared:hits") is not None
                if i % 10 == 9:
                    batch = mine[i - 9 : i + 1]
                    got = c.get_many(batch)
                    assert got == {k: small_profile(n * 1000 + i - 9 + j) for j, k in enumerate(batch)}
                    assert c.set_many({k: [n, i, k] for k in batch}) == []
                    assert c.get_many(batch) == {k: [n, i, k] for k in batch}
                    assert c.delete(batch[0])
                    assert c.get(batch[0]) is None
                    assert c.get_or_set(batch[0], lambda k=batch[0]: k, ttl=0) == batch[0]
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(THREADS)]
    reader = memfleet.Client([s.address for s in servers3])
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads), "a thread is stuck"
        assert not errors, errors[:3]
        assert reader.get("shared:hits") == THREADS * ROUNDS
        # the family trained (on the client's worker thread, most likely while the writes went on)
        deadline = time.monotonic() + 20
        while c.dictionaries.stats()["trained"] < 1:
            assert time.monotonic() < deadline, c.dictionaries.stats()
            time.sleep(0.01)
    finally:
        c.close()
        reader.close()
