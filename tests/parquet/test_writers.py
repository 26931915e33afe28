"""sluice's Parquet reader against other writers (docs/PARQUET.md, "Tests"):
files written by pyarrow (every codec and encoding it writes, data pages v1
and v2, dictionary fallback to plain mid-chunk, nulls, empty and null lists,
1-row and 1M-row row groups, statistics present and absent, INT96, the
non-compliant list names), DuckDB and polars, and the fixtures of
tests/data/parquet/ (among them hand-made legacy two-level lists), each read
with `sluice parquet cat` and compared value by value with pyarrow's read
of the same file; and malformed files refused with errors naming what and
where. Run by ctest parquet_writers in the venv of ops/parquet-venv."""
import datetime
import os
import random
import struct

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pqcompare import compare, sluice, sluice_rows

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "data", "parquet")
SEED = int(os.environ.get("SLUICE_TEST_SEED", "2211"))
print(f"parquet writers test: seed {SEED} (SLUICE_TEST_SEED)")


def mixed_table(n, seed=SEED, nulls=True):
    """Every kind of column a recommendation dataset has, n rows."""
    rng = random.Random(seed)

    def maybe(v):
        return None if nulls and rng.random() < 0.1 else v

    ts = datetime.datetime(2026, 11, 1, tzinfo=datetime.timezone.utc)
    return pa.table({
        "id": pa.array([i * 7919 for i in range(n)], pa.int64()),
        "i8": pa.array([maybe(rng.randint(-128, 127)) for _ in range(n)], pa.int8()),
        "i16": pa.array([maybe(rng.randint(-30000, 30000)) for _ in range(n)], pa.int16()),
        "i32": pa.array([maybe(rng.randint(-2**31, 2**31 - 1)) for _ in range(n)], pa.int32()),
        "u32": pa.array([maybe(rng.randint(0, 2**32 - 1)) for _ in range(n)], pa.uint32()),
        "u64": pa.array([maybe(rng.randint(0, 2**64 - 1)) for _ in range(n)], pa.uint64()),
        "i64": pa.array([maybe(rng.randint(-2**63, 2**63 - 1)) for _ in range(n)], pa.int64()),
        "small": pa.array([maybe(rng.randint(0, 9)) for _ in range(n)], pa.int64()),
        "flag": pa.array([maybe(rng.random() < 0.3) for _ in range(n)], pa.bool_()),
        "f32": pa.array([maybe(rng.uniform(-1e6, 1e6)) for _ in range(n)], pa.float32()),
        "f64": pa.array([maybe(rng.gauss(0, 1e3)) for _ in range(n)], pa.float64()),
        "country": pa.array([maybe(rng.choice(["de", "fr", "us", "jp", "ünï"])) for _ in range(n)]),
        "text": pa.array([maybe("".join(rng.choice("abcxyz\"\\\n") for _ in range(rng.randint(0, 12))))
                          for _ in range(n)]),
        "blob": pa.array([maybe(bytes(rng.randrange(256) for _ in range(rng.randint(0, 5))))
                          for _ in range(n)], pa.binary()),
        "fixed": pa.array([maybe(bytes(rng.randrange(256) for _ in range(4))) for _ in range(n)],
                          pa.binary(4)),
        "ts_ms": pa.array([maybe(ts + datetime.timedelta(milliseconds=rng.randint(0, 10**9)))
                           for _ in range(n)], pa.timestamp("ms", tz="UTC")),
        "ts_us": pa.array([maybe(ts + datetime.timedelta(microseconds=rng.randint(0, 10**12)))
                           for _ in range(n)], pa.timestamp("us")),
        "day": pa.array([maybe(datetime.date(2026, 1, 1) + datetime.timedelta(days=rng.randint(0, 900)))
                         for _ in range(n)], pa.date32()),
        "item_ids": pa.array([maybe([rng.randint(0, 10**12) for _ in range(rng.randint(0, 6))])
                              for _ in range(n)], pa.list_(pa.int64())),
        "cats": pa.array([maybe([maybe(rng.randint(0, 1000)) for _ in range(rng.randint(0, 4))])
                          for _ in range(n)], pa.list_(pa.int32())),
        "scores": pa.array([maybe([rng.random() for _ in range(rng.randint(0, 3))])
                            for _ in range(n)], pa.list_(pa.float32())),
        "tags": pa.array([maybe([rng.choice(["a", "bb", "ccc"]) for _ in range(rng.randint(0, 3))])
                          for _ in range(n)], pa.list_(pa.string())),
        "weighted": pa.array([maybe([{"id": rng.randint(0, 99), "weight": rng.random()}
                                     for _ in range(rng.randint(0, 3))]) for _ in range(n)],
                             pa.list_(pa.struct([("id", pa.int64()), ("weight", pa.float32())]))),
        "pos": pa.array([maybe({"x": rng.randint(0, 9), "y": maybe(rng.random())}) for _ in range(n)],
                        pa.struct([("x", pa.int32()), ("y", pa.float64())])),
    })


def roundtrip(tmp_path, table, name, **kw):
    path = tmp_path / name
    pq.write_table(table, path, **kw)
    return compare(path, pq.read_table(path))


@pytest.mark.parametrize("codec", ["none", "snappy", "gzip", "zstd", "lz4"])
@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_codecs_and_page_versions(tmp_path, codec, version):
    t = mixed_table(3000)
    assert roundtrip(tmp_path, t, "t.parquet", compression=codec, data_page_version=version,
                     row_group_size=1200, data_page_size=4096) == 3000


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_plain_encoding(tmp_path, version):
    roundtrip(tmp_path, mixed_table(2000), "t.parquet", use_dictionary=False,
              data_page_version=version, compression="zstd")


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_delta_and_byte_stream_split_encodings(tmp_path, version):
    t = mixed_table(5000)
    enc = {"id": "DELTA_BINARY_PACKED", "i32": "DELTA_BINARY_PACKED",
           "i64": "DELTA_BINARY_PACKED", "u32": "DELTA_BINARY_PACKED",
           "small": "DELTA_BINARY_PACKED", "ts_us": "DELTA_BINARY_PACKED",
           "country": "DELTA_LENGTH_BYTE_ARRAY", "text": "DELTA_BYTE_ARRAY",
           "blob": "DELTA_LENGTH_BYTE_ARRAY", "fixed": "DELTA_BYTE_ARRAY",
           "f32": "BYTE_STREAM_SPLIT", "f64": "BYTE_STREAM_SPLIT", "u64": "BYTE_STREAM_SPLIT",
           "day": "BYTE_STREAM_SPLIT", "item_ids": "DELTA_BINARY_PACKED",
           "tags": "DELTA_BYTE_ARRAY", "scores": "BYTE_STREAM_SPLIT", "flag": "RLE"}
    path = tmp_path / "t.parquet"
    pq.write_table(t, path, use_dictionary=False, column_encoding=enc, data_page_version=version,
                   compression="snappy", data_page_size=2048)
    md = pq.ParquetFile(path).metadata
    seen = {e for g in range(md.num_row_groups) for c in range(md.num_columns)
            for e in md.row_group(g).column(c).encodings}
    for e in ("DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
              "BYTE_STREAM_SPLIT", "RLE"):
        assert e in seen, f"pyarrow wrote no {e} page ({seen})"
    compare(path, pq.read_table(path))


def test_dictionary_fallback_to_plain_mid_chunk(tmp_path):
    rng = random.Random(SEED)
    n = 20000
    t = pa.table({"s": [f"value-{rng.randrange(10**9)}" for _ in range(n)],
                  "v": pa.array([rng.randrange(10**12) for _ in range(n)], pa.int64())})
    path = tmp_path / "t.parquet"
    pq.write_table(t, path, dictionary_pagesize_limit=2048, data_page_size=1024)
    col = pq.ParquetFile(path).metadata.row_group(0).column(0)
    assert col.has_dictionary_page and "PLAIN" in col.encodings, col.encodings
    compare(path, pq.read_table(path))


def test_nulls_empty_and_null_lists(tmp_path):
    t = pa.table({
        "l": pa.array([[], None, [1], [None], [None, 2], [], None], pa.list_(pa.int64())),
        "all_null": pa.array([None] * 7, pa.int64()),
        "s": pa.array([None, "", "x", None, "", "yy", None]),
        "req": pa.array(list(range(7)), pa.int32()),
    }, schema=pa.schema([("l", pa.list_(pa.int64())), ("all_null", pa.int64()),
                         ("s", pa.string()), pa.field("req", pa.int32(), nullable=False)]))
    for v in ("1.0", "2.0"):
        roundtrip(tmp_path, t, f"t{v}.parquet", data_page_version=v)
    rows = sluice_rows(tmp_path / "t1.0.parquet")
    assert [r["l"] for r in rows] == [[], None, [1], [None], [None, 2], [], None]


def test_one_row_row_groups(tmp_path):
    t = mixed_table(5)
    path = tmp_path / "t.parquet"
    pq.write_table(t, path, row_group_size=1)
    assert pq.ParquetFile(path).metadata.num_row_groups == 5
    compare(path, pq.read_table(path))
    # --row-group and --limit
    rows = sluice_rows(path, "--row-group", "3")
    assert rows == sluice_rows(path)[3:4]
    assert sluice_rows(path, "--limit", "2", "--columns", "id,tags") == [
        {"id": r["id"], "tags": r["tags"]} for r in sluice_rows(path)[:2]]


def test_million_row_row_group(tmp_path):
    n = 1_000_000
    rng = random.Random(SEED)
    t = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "x": pa.array([rng.random() for _ in range(n)], pa.float32()),
        "ids": pa.array([[i, i + 1] if i % 5 else [] for i in range(n)], pa.list_(pa.int64())),
    })
    path = tmp_path / "big.parquet"
    pq.write_table(t, path, row_group_size=n, compression="zstd")
    assert pq.ParquetFile(path).metadata.row_group(0).num_rows == n
    assert compare(path, pq.read_table(path)) == n


@pytest.mark.parametrize("stats", [True, False])
def test_statistics_present_and_absent(tmp_path, stats):
    path = tmp_path / "t.parquet"
    pq.write_table(mixed_table(100), path, write_statistics=stats)
    out = sluice("parquet", "inspect", str(path)).stdout
    assert ("no statistics" in out) == (not stats)
    if stats:
        assert "  small: SNAPPY" in out and ", min 0, max 9" in out
    compare(path, pq.read_table(path))


def test_int96_timestamps(tmp_path):
    ts = [datetime.datetime(1969, 12, 31, 23, 59, 59), datetime.datetime(2026, 11, 29, 3, 4, 5, 6),
          None, datetime.datetime(1900, 1, 1)]
    t = pa.table({"ts": pa.array(ts, pa.timestamp("ns"))})
    path = tmp_path / "t.parquet"
    pq.write_table(t, path, use_deprecated_int96_timestamps=True)
    assert pq.ParquetFile(path).schema.column(0).physical_type == "INT96"
    compare(path, pq.read_table(path))
    assert sluice_rows(path)[1]["ts"] == 1795921445000006000


def test_non_compliant_list_names(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(mixed_table(500), path, use_compliant_nested_type=False)
    assert "item" in str(pq.ParquetFile(path).schema)
    compare(path, pq.read_table(path))


def test_page_checksums(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(mixed_table(300), path, write_page_checksum=True, compression="none")
    compare(path, pq.read_table(path))
    # flip one byte inside the first column's first page
    data = bytearray(path.read_bytes())
    data[40] ^= 0xFF
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(bytes(data))
    p = sluice("parquet", "cat", str(bad), "--columns", "id", check=False)
    assert p.returncode == 1
    assert "row group 0 column id page" in p.stderr and "CRC" in p.stderr, p.stderr


def test_duckdb_writer(tmp_path):
    for codec, version in (("zstd", "V1"), ("snappy", "V2"), ("uncompressed", "V1"),
                           ("gzip", "V2"), ("lz4_raw", "V1")):
        path = tmp_path / f"duck-{codec}.parquet"
        duckdb.sql(f"""
            COPY (SELECT i AS id, (i * 37) % 1000 AS small, i / 7.0 AS ratio,
                         CAST(i AS FLOAT) / 3 AS f, 'user-' || (i % 97) AS name,
                         CASE WHEN i % 5 = 0 THEN NULL ELSE i END AS maybe,
                         CASE WHEN i % 4 = 0 THEN NULL
                              ELSE [i, i + 1, i + 2][1:(i % 4)] END AS ids,
                         i % 2 = 0 AS even,
                         TIMESTAMP '2026-11-01 00:00:00' + INTERVAL (i) SECOND AS ts,
                         [{{'id': i, 'weight': CAST(i AS FLOAT) / 8}}] AS w
                  FROM range(5000) t(i))
            TO '{path}' (FORMAT parquet, COMPRESSION {codec}, PARQUET_VERSION {version},
                         ROW_GROUP_SIZE 2048)""")
        compare(path, pq.read_table(path))


@pytest.mark.parametrize("codec", ["zstd", "snappy", "lz4", "gzip", "uncompressed"])
def test_polars_writer(tmp_path, codec):
    n = 4000
    df = pl.DataFrame({
        "id": list(range(n)),
        "f": [i / 3 for i in range(n)],
        "name": [None if i % 9 == 0 else f"n{i % 13}" for i in range(n)],
        "ids": [[i, i * 2] if i % 3 else None for i in range(n)],
        "flag": [i % 3 == 0 for i in range(n)],
        "u": pl.Series([i for i in range(n)], dtype=pl.UInt32),
    })
    path = tmp_path / f"polars-{codec}.parquet"
    df.write_parquet(path, compression=codec, statistics=codec != "gzip", row_group_size=1500)
    compare(path, pq.read_table(path))


def test_fixtures():
    names = sorted(f for f in os.listdir(FIXTURES) if f.endswith(".parquet"))
    assert len(names) >= 6, names
    for name in names:
        path = os.path.join(FIXTURES, name)
        compare(path, pq.read_table(path))


def test_batch_boundaries_anywhere():
    # rows cut into batches of 1, 7 and 4096 rows (lists never split across
    # batches) give the same output
    for name in sorted(f for f in os.listdir(FIXTURES) if f.endswith(".parquet")):
        path = os.path.join(FIXTURES, name)
        whole = sluice("parquet", "cat", path).stdout
        for n in ("1", "7"):
            assert sluice("parquet", "cat", path, "--batch-rows", n).stdout == whole, (name, n)


def test_legacy_two_level_lists_fixture():
    rows = sluice_rows(os.path.join(FIXTURES, "legacy-two-level.parquet"))
    assert rows[0] == {"id": 1, "nums": [1, 2, 3], "tags": [10, 20],
                       "pairs.id": [7], "pairs.weight": [0.25]}
    assert rows[1] == {"id": 2, "nums": [], "tags": None, "pairs.id": [], "pairs.weight": []}


# ---- malformed files ----

def fail(path, *args):
    p = sluice("parquet", *(args or ("cat",)), str(path), check=False)
    assert p.returncode == 1, (p.returncode, p.stdout[:200], p.stderr)
    return p.stderr


def test_malformed_files(tmp_path):
    good = tmp_path / "good.parquet"
    pq.write_table(mixed_table(200), good, compression="none")
    data = good.read_bytes()
    (tmp_path / "short").write_bytes(b"PAR1")
    assert "too short for Parquet" in fail(tmp_path / "short")
    (tmp_path / "magic").write_bytes(b"XXXX" + data[4:])
    assert "wrong magic" in fail(tmp_path / "magic")
    (tmp_path / "trunc").write_bytes(data[: len(data) // 2])
    assert "wrong magic" in fail(tmp_path / "trunc")
    flen = struct.unpack("<I", data[-8:-4])[0]
    (tmp_path / "footlen").write_bytes(data[:-8] + struct.pack("<I", len(data)) + b"PAR1")
    assert "footer length" in fail(tmp_path / "footlen")
    # the footer cut short (its length kept): thrift runs out
    start = len(data) - 8 - flen
    cut = data[:start + flen // 2]
    (tmp_path / "footcut").write_bytes(cut + struct.pack("<I", flen // 2) + b"PAR1")
    err = fail(tmp_path / "footcut")
    assert "footer: thrift " in err and " left" in err, err
    # the data pages overwritten with garbage: errors name row group, column and page
    junk = bytearray(data)
    for i in range(4, len(data) - 8 - flen):
        junk[i] = (i * 131) & 0xFF
    (tmp_path / "junk").write_bytes(bytes(junk))
    err = fail(tmp_path / "junk")
    assert "row group 0 column id page" in err, err


def test_unsupported_codec_named(tmp_path):
    path = tmp_path / "b.parquet"
    pq.write_table(mixed_table(10), path, compression="brotli")
    err = fail(path)
    assert "codec BROTLI (4) is not supported" in err, err
    assert "BROTLI" in sluice("parquet", "inspect", str(path)).stdout


def test_columns_unknown_is_usage_error(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(mixed_table(3), path)
    p = sluice("parquet", "cat", str(path), "--columns", "nope", check=False)
    assert p.returncode == 2 and "no column 'nope'" in p.stderr
