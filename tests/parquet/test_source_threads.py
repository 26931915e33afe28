"""The Parquet source decoding and converting on several threads
(docs/PARQUET.md, "Decoding on several threads"): `sluice worker --threads
1, 2, 3` over the same pyarrow file serve the same batches, value for
value, and refuse a bad row with the same message. The file has row groups
of 8,192 rows (two batches of 4,096; the last group a batch and a short
one), so that stripes of 4,096 rows are whole batches, nulls, null and
empty lists and null elements, hashed strings, weighted lists, and list
lengths that jump tenfold mid-file, so that a stripe laid out before the
decode with the last run's estimate is too small and is converted again on
the reader thread."""
import random

import pyarrow as pa
import pyarrow.parquet as pq

from test_source import run_job

SEED = 2212


def make_table(n, rng):
    def maybe(x, p):
        return None if rng.random() < p else x

    def ids(i):
        if i % 13 == 0:
            return None
        long = 12288 <= i < 16384  # ten times the ids a row: the estimate falls short
        k = rng.randrange(20, 40) if long else rng.randrange(4)
        return [maybe(rng.randrange(1 << 30), 0.05) for _ in range(k)]

    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "click": pa.array([rng.randrange(2) for _ in range(n)], pa.int8()),
        "age": pa.array([maybe(rng.randrange(90) * 0.5, 0.2) for _ in range(n)], pa.float32()),
        "price": pa.array([maybe(rng.random() * 100, 0.1) for _ in range(n)], pa.float64()),
        "C1": pa.array([maybe(rng.randrange(5000), 0.1) for _ in range(n)], pa.int64()),
        "country": pa.array([maybe(rng.choice(["de", "fr", "jp", "br"]), 0.05)
                             for _ in range(n)]),
        "item_ids": pa.array([ids(i) for i in range(n)], pa.list_(pa.int64())),
        "tags": pa.array([[{"id": rng.randrange(50), "weight": rng.random()}
                           for _ in range(rng.randrange(3))] for _ in range(n)],
                         pa.list_(pa.struct([("id", pa.int64()), ("weight", pa.float32())]))),
    })


# without weighted keys: whole stripes are built in place
PLAIN = {"sample_id": "id", "labels": ["click"], "dense": ["age", "price"],
         "sparse": ["C1", "item_ids", {"column": "country", "hash": {"seed": 7}}],
         "infer": False}
WEIGHTED = dict(PLAIN, weighted=[{"column": "tags"}])


def same_at_every_thread_count(tmp_path, name, source, size):
    first = lambda b: b["sample_ids"][0]  # noqa: E731
    want = None
    for threads in (1, 2, 3):
        got, _ = run_job(tmp_path, f"{name}_{threads}", source, batch={"size": size},
                         threads=threads)
        got = sorted(got, key=first)  # transform threads may finish batches out of order
        if want is None:
            want = got
            assert sum(b["batch_size"] for b in want) == 30000
        else:
            assert len(got) == len(want), (threads, size)
            for g, w in zip(got, want):
                assert g == w, (threads, size, first(w))


def test_parquet_threads_same_batches(tmp_path):
    print(f"seed {SEED}")
    t = make_table(30000, random.Random(SEED))
    path = tmp_path / "t.parquet"
    pq.write_table(t, path, row_group_size=8192, compression="zstd")
    for mapping, tag in ((PLAIN, "plain"), (WEIGHTED, "weighted")):
        source = {"parquet": str(path), "columns": mapping}
        # a stripe a batch (in place), runs inside a batch, stripes across batches
        for size in (4096, 1000, 5000):
            same_at_every_thread_count(tmp_path, f"{tag}{size}", source, size)


def test_parquet_threads_same_refusal(tmp_path):
    # a negative id in C1 at row 20,001 (from 1), in a stripe the threads
    # convert: the same message at every thread count
    rng = random.Random(SEED + 1)
    t = make_table(30000, rng)
    c1 = t.column("C1").to_pylist()
    c1[20000] = -5
    t = t.set_column(t.column_names.index("C1"), "C1", pa.array(c1, pa.int64()))
    path = tmp_path / "neg.parquet"
    pq.write_table(t, path, row_group_size=8192, compression="zstd")
    msgs = []
    for threads in (1, 2, 3):
        _, log = run_job(tmp_path, f"neg{threads}", {"parquet": str(path), "columns": PLAIN},
                         batch={"size": 4096}, threads=threads, expect_fail=True)
        line = [x for x in log.splitlines() if "row 20001" in x]
        assert line, log
        msgs.append(line[0])
    assert msgs[0] == msgs[1] == msgs[2], msgs
    assert "-5" in msgs[0], msgs[0]
