"""Transforms at decode on the Parquet source (docs/WORKER.md, "Transforms
at decode"): a worker whose per-value transforms run in the column readers
(a dictionary column chunk's dictionary mapped once, its indices gathering
the results; other pages and columns value by value) serves exactly the
batches of the same job run with `--no-decode-maps`, on files written by
pyarrow with dictionary and plain pages, nulls, a dictionary that falls
back to plain pages mid-chunk, and every transform kind of the criteo job
(sigrid_hash, log1p) besides the other per-value ones. A negative raw id
in a dictionary is still refused, with the same message."""
import random

import pyarrow as pa
import pyarrow.parquet as pq

from test_source import run_job

SEED = 2211


def make_table(n, rng):
    def maybe(x, p):
        return None if rng.random() < p else x

    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "click": pa.array([rng.randrange(2) for _ in range(n)], pa.int8()),
        # counts of few distinct values with nulls: dictionary pages
        "I1": pa.array([maybe(rng.randrange(40), 0.2) for _ in range(n)], pa.int64()),
        "I2": pa.array([maybe(rng.randrange(100) * 0.5 - 3, 0.1) for _ in range(n)],
                       pa.float32()),
        "I3": pa.array([maybe(float(rng.randrange(1000)), 0.05) for _ in range(n)],
                       pa.float64()),
        "I4": pa.array([maybe(rng.randrange(1, 50), 0.3) for _ in range(n)], pa.int32()),
        # single ids of a few thousand distinct values, nulls among them
        "C1": pa.array([maybe(rng.randrange(3000), 0.1) for _ in range(n)], pa.int64()),
        # lists: few distinct ids, empty and null lists, null elements
        "C2": pa.array([None if i % 11 == 0 else
                        [maybe(rng.randrange(500), 0.05) for _ in range(rng.randrange(4))]
                        for i in range(n)], pa.list_(pa.int64())),
        # many distinct ids: the dictionary outgrows its page limit and the
        # chunk falls back to plain pages mid-way
        "C3": pa.array([[rng.randrange(1 << 40) for _ in range(rng.randrange(1, 3))]
                        for _ in range(n)], pa.list_(pa.int64())),
        # written without a dictionary (plain pages)
        "C4": pa.array([[rng.randrange(1 << 20)] for _ in range(n)], pa.list_(pa.int64())),
        "C5": pa.array([[rng.randrange(60) for _ in range(2)] for _ in range(n)],
                       pa.list_(pa.int64())),
        "C6": pa.array([[rng.randrange(200)] for _ in range(n)], pa.list_(pa.int64())),
        "C7": pa.array([[rng.randrange(200)] for _ in range(n)], pa.list_(pa.int64())),
    })


MAPPING = {"sample_id": "id", "labels": ["click"], "dense": ["I1", "I2", "I3", "I4"],
           "sparse": ["C1", "C2", "C3", "C4", "C5", "C6", "C7"], "infer": False}


def transforms(vocab):
    return [
        {"op": "fill_missing", "feature": "I1", "value": 0},
        {"op": "log1p", "feature": "I1"},
        {"op": "clamp", "feature": "I2", "min": -1, "max": 20},
        {"op": "normalize", "feature": "I2", "mean": 3.5, "std": 2.25},
        {"op": "fill_missing", "feature": "I3", "value": 1},
        {"op": "boxcox", "feature": "I3", "lambda": 0.5},
        {"op": "log1p", "feature": "I4"},
        {"op": "fill_missing", "feature": "I4", "value": -2},
        {"op": "sigrid_hash", "feature": "C1", "table_size": 1000, "salt": 3},
        {"op": "sigrid_hash", "feature": "C2", "table_size": 1 << 20},
        {"op": "modulo", "feature": "C2", "divisor": 977},
        {"op": "sigrid_hash", "feature": "C3", "table_size": 5000000, "salt": 9},
        {"op": "first_x", "feature": "C3", "x": 1},
        {"op": "modulo", "feature": "C4", "divisor": 1000},
        {"op": "map_vocab", "feature": "C5", "file": str(vocab)},
        # read by a cross: stays on the batches
        {"op": "sigrid_hash", "feature": "C6", "table_size": 100},
        {"op": "cross", "features": ["C6", "C7"], "table_size": 1000, "output": "C67"},
    ]


def write(t, path):
    # row groups of 2,500 rows, pages of ~1 KiB, a dictionary page limit of
    # 16 KiB (C3's 4,000 distinct ids of a row group outgrow it); C4 plain
    pq.write_table(t, path, row_group_size=2500, data_page_size=1024, write_batch_size=256,
                   dictionary_pagesize_limit=16384,
                   use_dictionary=[c + ".list.element" if pa.types.is_list(t.schema.field(c).type)
                                   else c for c in t.column_names if c != "C4"],
                   compression="zstd")


def run_both(tmp_path, name, source, spec_extra):
    """The job with and without --no-decode-maps: (batches, log) of each."""
    got = []
    for flag in ([], ["--no-decode-maps"]):
        got.append(run_job(tmp_path, f"{name}{len(flag)}", source, batch={"size": 256},
                           extra_spec=spec_extra, worker_args=flag))
    return got


def test_parquet_decode_maps_same_batches(tmp_path):
    print(f"seed {SEED}")
    rng = random.Random(SEED)
    t = make_table(7000, rng)
    path = tmp_path / "in.parquet"
    write(t, path)
    md = pq.ParquetFile(path).metadata
    # the file has what the test is about: C3 a dictionary page that cannot
    # hold a row group's distinct ids (16 KiB: 2,048 of them), so the chunk
    # goes on in plain pages; C4 no dictionary; C1 a dictionary
    cols = {md.row_group(0).column(i).path_in_schema: md.row_group(0).column(i)
            for i in range(md.num_columns)}
    assert cols["C3.list.element"].has_dictionary_page
    assert len({x for r in t.column("C3").to_pylist()[:2500] for x in r}) > 2048
    assert not cols["C4.list.element"].has_dictionary_page
    assert cols["C1"].has_dictionary_page and cols["I1"].has_dictionary_page
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"{v}\n" for v in range(0, 60, 3)))
    source = {"parquet": str(path), "columns": MAPPING}
    (on, on_log), (off, off_log) = run_both(tmp_path, "dm", source,
                                            {"transforms": transforms(vocab)})
    assert len(on) == len(off) == (7000 + 255) // 256, (on_log, off_log)
    assert on == off
    # the transforms ran: ids within their tables, counts through log1p
    b = on[0]
    keys = b["sparse"]["keys"]
    assert "C67" in keys
    vals, lens, stride = b["sparse"]["values"], b["sparse"]["lengths"], b["sparse"]["stride"]
    k = keys.index("C1")
    start = sum(lens[:k * stride])
    c1 = vals[start:start + sum(lens[k * stride:(k + 1) * stride])]
    assert c1 and all(0 <= x < 1000 for x in c1)
    raw = [x for x in t.column("C1").to_pylist()[:256] if x is not None]
    assert c1 != raw


def test_parquet_decode_maps_refuse_negative_ids(tmp_path):
    # a negative id in C1's dictionary: row 1,234 (from 1) is refused, with
    # the same message whether the dictionary is mapped or not
    rng = random.Random(SEED + 1)
    t = make_table(3000, rng)
    c1 = t.column("C1").to_pylist()
    c1[1233] = -17
    t = t.set_column(t.column_names.index("C1"), "C1", pa.array(c1, pa.int64()))
    path = tmp_path / "neg.parquet"
    write(t, path)
    source = {"parquet": str(path), "columns": MAPPING}
    spec = {"transforms": [{"op": "sigrid_hash", "feature": "C1", "table_size": 1000}]}
    msgs = []
    for flag in ([], ["--no-decode-maps"]):
        _, log = run_job(tmp_path, f"neg{len(flag)}", source, batch={"size": 256},
                         extra_spec=spec, worker_args=flag, expect_fail=True)
        line = [x for x in log.splitlines() if "row 1234" in x]
        assert line, log
        msgs.append(line[0])
    assert msgs[0] == msgs[1]
    assert "-17" in msgs[0], msgs[0]
