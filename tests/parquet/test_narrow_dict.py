"""INT64 dictionaries kept narrow (docs/PARQUET.md, "Dictionaries kept
narrow"): a dictionary of more than 2,048 entries (16 KiB) whose entries
all fit in 32 bits is gathered from 32-bit copies of them. Files written by
pyarrow with such dictionaries (entries at both ends of the 32-bit range),
dictionaries one entry past either end, unsigned 32-bit values above 2^31,
null and empty lists, null elements and pages of about 2 KiB (page
boundaries inside lists) read with `sluice parquet cat` exactly as pyarrow
reads them, at any batch size; and a worker whose transforms at decode map
a narrow dictionary into values that no longer fit (or a wide one into
values that do) serves exactly the batches of `--no-decode-maps`."""
import random

import pyarrow as pa
import pyarrow.parquet as pq

from pqcompare import compare, sluice
from test_source import run_job

SEED = 2213
LO, HI = -2**31, 2**31 - 1


def pool(rng, n, lo, hi, ends):
    """n distinct values in [lo, hi], the values ends among them."""
    vals = set(ends)
    while len(vals) < n:
        vals.add(rng.randint(lo, hi))
    return sorted(vals)


def lists(rng, n, values):
    """n rows of 0-5 ids from values; null lists and null elements among
    them."""
    out = []
    for i in range(n):
        if i % 13 == 0:
            out.append(None)
        else:
            out.append([None if rng.random() < 0.02 else rng.choice(values)
                        for _ in range(rng.randrange(6))])
    return out


def make_table(n, rng):
    narrow = pool(rng, 5000, LO, HI, [LO, HI, -1, 0])
    u32 = pool(rng, 3000, 0, 2**32 - 1, [0, HI, HI + 1, 2**32 - 1])
    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "narrow": pa.array(lists(rng, n, narrow), pa.list_(pa.int64())),
        # one entry past the top or the bottom of 32 bits: kept wide
        "past_hi": pa.array(lists(rng, n, narrow + [HI + 1]), pa.list_(pa.int64())),
        "past_lo": pa.array(lists(rng, n, [LO - 1] + narrow), pa.list_(pa.int64())),
        # unsigned 32-bit values, read as int64 0..2^32-1: above 2^31, wide
        "u32": pa.array([None if rng.random() < 0.05 else rng.choice(u32)
                         for _ in range(n)], pa.uint32()),
        "scalar": pa.array([None if rng.random() < 0.1 else rng.choice(narrow)
                            for _ in range(n)], pa.int64()),
    })


def write(t, path):
    pq.write_table(t, path, row_group_size=12000, data_page_size=2048, write_batch_size=256,
                   dictionary_pagesize_limit=1 << 20, compression="zstd")


def test_narrow_dictionaries_read_exactly(tmp_path):
    print(f"seed {SEED}")
    rng = random.Random(SEED)
    t = make_table(20000, rng)
    path = tmp_path / "narrow.parquet"
    write(t, path)
    md = pq.ParquetFile(path).metadata
    # the file has what the test is about: every chunk dictionary-coded
    # (a limit of 1 MiB holds every dictionary: no fallback to plain pages),
    # dictionaries of more than 2,048 entries, many pages
    for g in range(md.num_row_groups):
        for i in range(md.num_columns):
            c = md.row_group(g).column(i)
            if c.path_in_schema == "id":
                continue
            assert c.has_dictionary_page, c.path_in_schema
    rows0 = t.slice(0, 12000)
    for name in ("narrow", "past_hi", "past_lo"):
        assert len({x for r in rows0.column(name).to_pylist() if r for x in r
                    if x is not None}) > 2048
    assert len(set(rows0.column("u32").to_pylist())) > 2048
    assert len(set(rows0.column("scalar").to_pylist())) > 2048
    assert md.row_group(0).column(1).total_uncompressed_size > 20 * 2048
    assert compare(path, pq.read_table(path)) == 20000
    whole = sluice("parquet", "cat", str(path)).stdout
    for n in ("1", "7", "1000"):
        assert sluice("parquet", "cat", str(path), "--batch-rows", n).stdout == whole, n


def test_narrow_dictionaries_mapped_at_decode(tmp_path):
    # non-negative ids (the worker refuses negative ones): a narrow
    # dictionary hashed into a table of 2^40 (wide after the map), a wide
    # one reduced modulo 1000 (narrow after it), and one left as it is
    rng = random.Random(SEED + 1)
    n = 9000
    narrow = pool(rng, 4000, 0, HI, [0, HI])
    wide = pool(rng, 4000, 0, 2**40, [HI + 1])
    t = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "label": pa.array([rng.randrange(2) for _ in range(n)], pa.int64()),
        "A": pa.array(lists(rng, n, narrow), pa.list_(pa.int64())),
        "B": pa.array(lists(rng, n, wide), pa.list_(pa.int64())),
        "C": pa.array(lists(rng, n, narrow), pa.list_(pa.int64())),
        "D": pa.array([None if rng.random() < 0.1 else rng.choice(narrow) for _ in range(n)],
                      pa.int64()),
    })
    path = tmp_path / "in.parquet"
    pq.write_table(t, path, row_group_size=5000, data_page_size=2048, write_batch_size=256,
                   dictionary_pagesize_limit=1 << 20, compression="zstd")
    mapping = {"sample_id": "id", "labels": ["label"], "dense": [],
               "sparse": ["A", "B", "C", "D"], "infer": False}
    source = {"parquet": str(path), "columns": mapping}
    spec = {"transforms": [
        {"op": "sigrid_hash", "feature": "A", "table_size": 1 << 40, "salt": 5},
        {"op": "modulo", "feature": "B", "divisor": 1000},
        {"op": "sigrid_hash", "feature": "D", "table_size": 1 << 20},
    ]}
    got = []
    for flag in ([], ["--no-decode-maps"]):
        got.append(run_job(tmp_path, f"nd{len(flag)}", source, batch={"size": 1000},
                           extra_spec=spec, worker_args=flag))
    (on, on_log), (off, off_log) = got
    assert len(on) == len(off) == 9, (on_log, off_log)
    assert on == off
    # the maps ran: A's ids hashed past 32 bits, B's below 1000, C's as read
    b = on[0]
    keys, vals = b["sparse"]["keys"], b["sparse"]["values"]
    lens, stride = b["sparse"]["lengths"], b["sparse"]["stride"]

    def key_ids(name):
        k = keys.index(name)
        start = sum(lens[:k * stride])
        return vals[start:start + sum(lens[k * stride:(k + 1) * stride])]

    assert any(x > HI for x in key_ids("A"))
    assert key_ids("B") and all(0 <= x < 1000 for x in key_ids("B"))
    want_c = [x for r in t.column("C").to_pylist()[:1000] if r for x in r if x is not None]
    assert key_ids("C") == want_c
