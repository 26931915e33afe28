"""Writes the small Parquet files kept under tests/data/parquet/ (the
fixtures test_writers.py compares and the seeds of the parquet_file fuzz
target, tests/fuzz/corpus/parquet_file/): files from pyarrow, DuckDB and
polars, and legacy-two-level.parquet, written here by hand (a minimal
Thrift compact encoder below) because no current writer produces the
two-level list layouts older parquet-mr and Hive writers did. Run in the
venv of ops/parquet-venv:

    "$(ops/parquet-venv)/bin/python" tests/parquet/make_fixtures.py"""
import os
import shutil
import struct
import sys

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_writers import mixed_table  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
OUT = os.path.join(ROOT, "tests", "data", "parquet")
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus", "parquet_file")


# ---- a minimal Thrift compact protocol writer ----

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def zz(n):
    return varint((n << 1) ^ (n >> 63))


I32, I64, BINARY, LIST, STRUCT = 5, 6, 8, 9, 12


def struct_(fields):
    """fields: [(id, type, value)] in id order; value already encoded for
    I32/I64 (an int), BINARY (bytes), LIST ((elem_type, [encoded...])),
    STRUCT (encoded bytes)."""
    out, last = bytearray(), 0
    for fid, t, v in fields:
        out.append(((fid - last) << 4) | t)
        last = fid
        if t in (I32, I64):
            out += zz(v)
        elif t == BINARY:
            out += varint(len(v)) + v
        elif t == LIST:
            et, items = v
            out.append((len(items) << 4) | et if len(items) < 15 else 0xF0 | et)
            if len(items) >= 15:
                out += varint(len(items))
            for it in items:
                out += zz(it) if et in (I32, I64) else (varint(len(it)) + it if et == BINARY else it)
        elif t == STRUCT:
            out += v
    out.append(0)
    return bytes(out)


def rle_levels(levels, width):
    """Each level as an RLE run of one, with v1's 4-byte length."""
    runs = b"".join(varint(2) + bytes([lv]) for lv in levels) if width else b""
    return struct.pack("<I", len(runs)) + runs


def legacy_two_level(path):
    """id: required int64; nums: a bare repeated int32 (a list of required
    ints); tags: LIST of `repeated int32 array` (two-level); pairs: LIST of
    `repeated group pairs_tuple {id, weight}` (two-level, a list of structs).
    Two rows: {1, [1,2,3], [10,20], [{7, 0.25}]}, {2, [], null, []}."""
    cols = [  # path, physical type, plain values, def levels, rep levels, max def, max rep
        (["id"], 2, struct.pack("<2q", 1, 2), [], [], 0, 0, 2),
        (["nums"], 1, struct.pack("<3i", 1, 2, 3), [1, 1, 1, 0], [0, 1, 1, 0], 1, 1, 4),
        (["tags", "array"], 1, struct.pack("<2i", 10, 20), [2, 2, 0], [0, 1, 0], 2, 1, 3),
        (["pairs", "pairs_tuple", "id"], 2, struct.pack("<q", 7), [2, 1], [0, 0], 2, 1, 2),
        (["pairs", "pairs_tuple", "weight"], 4, struct.pack("<f", 0.25), [2, 1], [0, 0], 2, 1, 2),
    ]
    body, chunks = bytearray(b"PAR1"), []
    for names, ptype, vals, defs, reps, maxd, maxr, nvals in cols:
        page = (rle_levels(reps, 1) if maxr else b"") + (rle_levels(defs, 2) if maxd else b"") + vals
        header = struct_([(1, I32, 0), (2, I32, len(page)), (3, I32, len(page)),
                          (5, STRUCT, struct_([(1, I32, nvals), (2, I32, 0), (3, I32, 3),
                                               (4, I32, 3)]))])
        offset = len(body)
        body += header + page
        meta = struct_([(1, I32, ptype), (2, LIST, (I32, [0, 3])),
                        (3, LIST, (BINARY, [n.encode() for n in names])), (4, I32, 0),
                        (5, I64, nvals), (6, I64, len(header) + len(page)),
                        (7, I64, len(header) + len(page)), (9, I64, offset)])
        chunks.append(struct_([(2, I64, offset), (3, STRUCT, meta)]))
    el = lambda **f: struct_(sorted(  # noqa: E731
        [(k, t, v) for k, (t, v) in f.items()], key=lambda x: x[0]))
    schema = [
        struct_([(4, BINARY, b"schema"), (5, I32, 4)]),
        struct_([(1, I32, 2), (3, I32, 0), (4, BINARY, b"id")]),
        struct_([(1, I32, 1), (3, I32, 2), (4, BINARY, b"nums")]),
        struct_([(3, I32, 1), (4, BINARY, b"tags"), (5, I32, 1), (6, I32, 3)]),
        struct_([(1, I32, 1), (3, I32, 2), (4, BINARY, b"array")]),
        struct_([(3, I32, 1), (4, BINARY, b"pairs"), (5, I32, 1), (6, I32, 3)]),
        struct_([(3, I32, 2), (4, BINARY, b"pairs_tuple"), (5, I32, 2)]),
        struct_([(1, I32, 2), (3, I32, 0), (4, BINARY, b"id")]),
        struct_([(1, I32, 4), (3, I32, 0), (4, BINARY, b"weight")]),
    ]
    del el
    rg = struct_([(1, LIST, (STRUCT, chunks)), (2, I64, len(body) - 4), (3, I64, 2)])
    footer = struct_([(1, I32, 1), (2, LIST, (STRUCT, schema)), (3, I64, 2),
                      (4, LIST, (STRUCT, [rg])), (6, BINARY, b"sluice make_fixtures.py")])
    with open(path, "wb") as f:
        f.write(bytes(body) + footer + struct.pack("<I", len(footer)) + b"PAR1")


def mapped_rows(path, rows=300, seed=11):
    """Every conversion of the column mapping in one file (the columnar
    conversion's test, tests/unit/pq_columns_test.c): ids, sessions out of
    order, labels and dense values of each numeric type with nulls, lists
    with null, empty lists and null elements, a list of struct{id, weight}
    with null weights, parallel id and weight lists (one row's lengths
    differ), strings and lists of strings to hash, and a list with a
    negative id in one row; row groups of 128, 128, 44."""
    import random
    rnd = random.Random(seed)

    def maybe(v, p=0.1):
        return None if rnd.random() < p else v

    def ids_list(p_null=0.1, p_elem=0.05):
        if rnd.random() < p_null:
            return None
        return [maybe(rnd.randrange(0, 1 << 40), p_elem) for _ in range(rnd.randrange(0, 6))]

    cat_ids, cat_w = [], []
    for i in range(rows):
        n = rnd.randrange(0, 4)
        cat_ids.append(None if i % 17 == 5 else [rnd.randrange(0, 1000) for _ in range(n)])
        cat_w.append(None if i % 17 == 5 else [rnd.random() for _ in range(n + (i == 77))])
    t = pa.table({
        "sample_id": pa.array([maybe(1000 + i) for i in range(rows)], pa.int64()),
        "session_id": pa.array([maybe(rnd.randrange(0, 20)) for _ in range(rows)], pa.int64()),
        "ts": pa.array([maybe(1_700_000_000 + rnd.randrange(0, 10**6)) for _ in range(rows)],
                       pa.int64()),
        "label": pa.array([maybe(float(rnd.random() < 0.3)) for _ in range(rows)], pa.float32()),
        "like": pa.array([maybe(rnd.randrange(0, 2)) for _ in range(rows)], pa.int32()),
        "f32": pa.array([maybe(rnd.uniform(-5, 5)) for _ in range(rows)], pa.float32()),
        "f64": pa.array([maybe(rnd.uniform(-1e6, 1e6)) for _ in range(rows)], pa.float64()),
        "i64": pa.array([maybe(rnd.randrange(-(1 << 62), 1 << 62)) for _ in range(rows)],
                        pa.int64()),
        "flag": pa.array([maybe(rnd.random() < 0.5) for _ in range(rows)], pa.bool_()),
        "item_ids": pa.array([ids_list() for _ in range(rows)], pa.list_(pa.int64())),
        "one_id": pa.array([maybe(rnd.randrange(0, 1 << 20)) for _ in range(rows)], pa.int64()),
        "tags": pa.array([None if rnd.random() < 0.1 else
                          [{"id": rnd.randrange(0, 1 << 30), "weight": maybe(rnd.random())}
                           for _ in range(rnd.randrange(0, 4))] for _ in range(rows)],
                         pa.list_(pa.struct([("id", pa.int64()), ("weight", pa.float32())]))),
        "cat_ids": pa.array(cat_ids, pa.list_(pa.int64())),
        "cat_w": pa.array(cat_w, pa.list_(pa.float32())),
        "country": pa.array([maybe(rnd.choice(["fr", "de", "us", "jp"])) for _ in range(rows)]),
        "words": pa.array([None if rnd.random() < 0.1 else
                           [maybe(rnd.choice(["a", "bb", "ccc"])) for _ in range(rnd.randrange(4))]
                           for _ in range(rows)], pa.list_(pa.string())),
        "neg_ids": pa.array([[1, -5, 2] if i == 130 else [i] for i in range(rows)],
                            pa.list_(pa.int64())),
    })
    pq.write_table(t, path, compression="zstd", row_group_size=128)


def scalar_nulls(path, rows=2000, seed=23):
    """Scalar nullable columns in pages of 100 rows (the dense batches of
    the columnar conversion, tests/unit/pq_columns_test.c): page p has no
    null (p % 5 == 0), only nulls (1), nulls at its start (2), at its end
    (3) or here and there (4); sa a dictionary of 40 ids, sb ids of 40
    bits whose dictionary outgrows its 2 KiB limit so that the chunk goes
    on in plain pages, neg a negative id at row 1235 (from 1); dense and
    label columns of each numeric type; row groups of 1200 and 800."""
    import random
    rnd = random.Random(seed)

    def null_at(r, shift):
        p, i = divmod(r, 100)
        kind = (p + shift) % 5
        return (kind == 1 or (kind == 2 and i < 37) or (kind == 3 and i >= 59)
                or (kind == 4 and rnd.random() < 0.3))

    def col(gen, shift, typ):
        return pa.array([None if null_at(r, shift) else gen(r) for r in range(rows)], typ)

    t = pa.table({
        "sid": col(lambda r: 5000 + r, 3, pa.int64()),
        "lab": col(lambda r: rnd.randrange(0, 2), 4, pa.int32()),
        "sa": col(lambda r: rnd.randrange(0, 40), 0, pa.int64()),
        "sb": col(lambda r: rnd.randrange(0, 1 << 40), 1, pa.int64()),
        "neg": col(lambda r: -3 if r == 1234 else r, 3, pa.int64()),
        "da": col(lambda r: rnd.uniform(-5, 5), 0, pa.float32()),
        "db": col(lambda r: rnd.uniform(-1e6, 1e6), 2, pa.float64()),
        "dc": col(lambda r: rnd.randrange(-(1 << 62), 1 << 62), 4, pa.int64()),
    })
    pq.write_table(t, path, compression="zstd", row_group_size=1200, write_batch_size=100,
                   data_page_size=1, dictionary_pagesize_limit=2048)
    # sb's first row group: more distinct ids than 2 KiB of dictionary holds
    sb = pq.ParquetFile(path).metadata.row_group(0).column(3)
    assert sb.path_in_schema == "sb" and sb.has_dictionary_page
    assert len({x for x in t.column("sb").to_pylist()[:1200] if x is not None}) > 2048 // 8


def overlap_rows(path, rows=10000, seed=29):
    """Row groups of 9000 and 1000 rows (batches of 4096, 4096 and 808,
    then 1000), so that stripes of 4096 rows end mid row group and are
    handed on while the next batch is decoded (tests/unit/pq_overlap_test.c):
    ids, a label, dense values with nulls, a dictionary id column with
    nulls, a list of ids (null, empty, lengths that grow fourfold in the
    second batch), a string to hash, and neg, a negative id at row 6001
    (from 1)."""
    import random
    rnd = random.Random(seed)

    def maybe(v, p=0.1):
        return None if rnd.random() < p else v

    def ids(i):
        if i % 11 == 0:
            return None
        k = rnd.randrange(4, 9) if 4096 <= i < 8192 else rnd.randrange(4)
        return [maybe(rnd.randrange(500), 0.05) for _ in range(k)]

    t = pa.table({
        "sid": pa.array(range(7000, 7000 + rows), pa.int64()),
        "label": pa.array([float(rnd.random() < 0.3) for _ in range(rows)], pa.float32()),
        "f32": pa.array([maybe(rnd.randrange(-20, 20) / 4) for _ in range(rows)], pa.float32()),
        "f64": pa.array([maybe(rnd.randrange(100) * 1.5, 0.3) for _ in range(rows)], pa.float64()),
        "C1": pa.array([maybe(rnd.randrange(3000)) for _ in range(rows)], pa.int64()),
        "item_ids": pa.array([ids(i) for i in range(rows)], pa.list_(pa.int64())),
        "country": pa.array([maybe(rnd.choice(["fr", "de", "us", "jp"])) for _ in range(rows)]),
        "neg": pa.array([-3 if i == 6000 else i for i in range(rows)], pa.int64()),
    })
    pq.write_table(t, path, compression="zstd", row_group_size=9000,
                   use_dictionary=["label", "f32", "f64", "C1", "item_ids", "country"],
                   column_encoding={"sid": "DELTA_BINARY_PACKED", "neg": "DELTA_BINARY_PACKED"})


def main():
    os.makedirs(OUT, exist_ok=True)
    p = lambda name: os.path.join(OUT, name)  # noqa: E731
    t = mixed_table(40, seed=7)
    pq.write_table(t, p("pyarrow-snappy-v1.parquet"), row_group_size=16)
    pq.write_table(t, p("pyarrow-delta-zstd-v2.parquet"), compression="zstd",
                   data_page_version="2.0", use_dictionary=False,
                   column_encoding={"id": "DELTA_BINARY_PACKED", "text": "DELTA_BYTE_ARRAY",
                                    "country": "DELTA_LENGTH_BYTE_ARRAY",
                                    "f64": "BYTE_STREAM_SPLIT", "flag": "RLE"})
    pq.write_table(t, p("pyarrow-noncompliant-gzip-crc.parquet"), compression="gzip",
                   use_compliant_nested_type=False, write_page_checksum=True,
                   write_statistics=False)
    pq.write_table(pa.table({"ts": pa.array([0, 10**18, None], pa.timestamp("ns"))}),
                   p("pyarrow-int96.parquet"), use_deprecated_int96_timestamps=True)
    pq.write_table(pa.table({"s": [f"v{i * 7919 % 1000}" for i in range(600)]}),
                   p("pyarrow-dict-fallback-lz4.parquet"), compression="lz4",
                   dictionary_pagesize_limit=256, data_page_size=256)
    duckdb.sql(f"""COPY (SELECT i AS id, 'u' || (i % 7) AS name, [i, i * 2] AS ids,
                               CASE WHEN i % 3 = 0 THEN NULL ELSE i / 4.0 END AS x
                        FROM range(50) t(i))
                   TO '{p("duckdb-zstd.parquet")}' (FORMAT parquet, COMPRESSION zstd)""")
    pl.DataFrame({"id": list(range(30)), "ids": [[i] * (i % 3) for i in range(30)],
                  "name": [None if i % 4 == 0 else f"p{i}" for i in range(30)]}).write_parquet(
        p("polars-lz4.parquet"), compression="lz4")
    legacy_two_level(p("legacy-two-level.parquet"))
    mapped_rows(p("pyarrow-mapped-zstd.parquet"))
    scalar_nulls(p("pyarrow-scalar-nulls-zstd.parquet"))
    overlap_rows(p("pyarrow-overlap-zstd.parquet"))
    os.makedirs(CORPUS, exist_ok=True)
    for name in sorted(os.listdir(OUT)):
        shutil.copy(p(name), os.path.join(CORPUS, name))
    print("fixtures:", ", ".join(sorted(os.listdir(OUT))))


if __name__ == "__main__":
    main()
