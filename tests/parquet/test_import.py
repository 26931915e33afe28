"""`sluice table import --format parquet` (docs/PARQUET.md, docs/TABLES.md):
Parquet files from pyarrow, DuckDB and polars imported through the column
mapping and read back with `sluice table cat`, compared value by value with
what pyarrow reads; a file cut into ranges of row groups by --threads gives
the same rows; bad inputs are refused naming the file or column."""
import json
import math
import os
import struct

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from pqcompare import sluice

SEED = int(os.environ.get("SLUICE_TEST_SEED", "2211"))


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def table_rows(table_dir):
    out = sluice("table", "cat", str(table_dir)).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    return sorted(rows, key=lambda r: r["sample_id"])


def sample_table(n):
    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "ts": pa.array([1_700_000_000 + i for i in range(n)], pa.int64()),
        "click": pa.array([i % 2 for i in range(n)], pa.int8()),
        "age": pa.array([None if i % 7 == 0 else i * 0.25 for i in range(n)], pa.float32()),
        "price": pa.array([i * 1.5 for i in range(n)], pa.float64()),
        "country": pa.array([["de", "fr", "jp"][i % 3] for i in range(n)]),
        "item_ids": pa.array([[i, i + 1] if i % 3 else None for i in range(n)],
                             pa.list_(pa.int64())),
        "tags": pa.array([[{"id": i % 5, "weight": 0.5 * (i % 3)}] if i % 4 else []
                          for i in range(n)],
                         pa.list_(pa.struct([("id", pa.int64()), ("weight", pa.float32())]))),
        "note": pa.array([f"n{i}" for i in range(n)]),
    })


MAPPING = {"sample_id": "id", "timestamp": "ts", "labels": ["click"],
           "dense": ["age", "price"],
           "sparse": ["item_ids", {"column": "country", "hash": {"seed": 7}}],
           "weighted": [{"column": "tags"}], "infer": False}


def check_rows(rows, t):
    want = t.to_pylist()
    assert len(rows) == len(want)
    hashes = {}
    for r, w in zip(rows, want):
        assert r["sample_id"] == w["id"] and r["ts"] == w["ts"]
        assert r["labels"] == {"click": float(w["click"])}
        if w["age"] is None:
            assert "age" not in r["dense"]
        else:
            assert f32(r["dense"]["age"]) == f32(w["age"])
        assert f32(r["dense"]["price"]) == f32(w["price"])
        assert r["sparse"]["item_ids"] == (w["item_ids"] or [])
        (cid,) = r["sparse"]["country"]
        assert 0 <= cid < 2**63
        assert hashes.setdefault(w["country"], cid) == cid
        assert r["weighted"]["tags"]["ids"] == [e["id"] for e in w["tags"]]
        assert [f32(x) for x in r["weighted"]["tags"]["weights"]] == \
            [f32(e["weight"]) for e in w["tags"]]
    assert len(set(hashes.values())) == 3


def test_import_with_mapping_and_threads(tmp_path):
    t = sample_table(5000)
    path = tmp_path / "in.parquet"
    pq.write_table(t, path, row_group_size=700, compression="zstd")
    mapping = tmp_path / "map.json"
    mapping.write_text(json.dumps(MAPPING))
    rows = {}
    for threads in (1, 3):
        table = tmp_path / f"t{threads}"
        p = sluice("table", "import", "--format", "parquet", "--input", str(path), "--table",
                   str(table), "--mapping", str(mapping), "--threads", str(threads), "--quiet")
        assert "5000 rows read, 5000 written, 0 skipped" in p.stdout + p.stderr
        rows[threads] = table_rows(table)
        check_rows(rows[threads], t)
    assert rows[1] == rows[3]
    assert len(os.listdir(tmp_path / "t3")) > len(os.listdir(tmp_path / "t1"))


def test_import_inferred_mapping_and_other_writers(tmp_path):
    path = tmp_path / "duck.parquet"
    duckdb.sql(f"""COPY (SELECT i AS sample_id, i % 2 AS label, i / 4.0 AS x,
                               [i, i * 2] AS ids, 'u' || i AS name
                        FROM range(300) t(i))
                   TO '{path}' (FORMAT parquet, COMPRESSION snappy)""")
    table = tmp_path / "t"
    sluice("table", "import", "--format", "parquet", "--input", str(path), "--table", str(table),
           "--quiet")
    rows = table_rows(table)
    assert len(rows) == 300
    for i, r in enumerate(rows):
        # inferred: sample_id and label by name, x dense, ids sparse; the string is ignored
        assert r["sample_id"] == i and r["labels"] == {"label": float(i % 2)}
        assert math.isclose(r["dense"]["x"], i / 4.0, rel_tol=1e-6)
        assert r["sparse"] == {"ids": [i, i * 2]}


def test_import_refusals(tmp_path):
    t = sample_table(50)
    a = tmp_path / "a.parquet"
    pq.write_table(t, a)
    b = tmp_path / "b.parquet"
    pq.write_table(t.drop_columns(["price"]), b)
    mapping = tmp_path / "map.json"
    mapping.write_text(json.dumps(MAPPING))
    p = sluice("table", "import", "--format", "parquet", "--input", str(a), str(b), "--table",
               str(tmp_path / "t"), "--mapping", str(mapping), "--quiet", check=False)
    assert p.returncode == 1 and "has no column price" in p.stderr, p.stderr
    assert not (tmp_path / "t").exists() or not any(
        f.endswith(".slc") for f in os.listdir(tmp_path / "t"))
    # a string column mapped without a hash
    bad = dict(MAPPING, sparse=["country"])
    mapping.write_text(json.dumps(bad))
    p = sluice("table", "import", "--format", "parquet", "--input", str(a), "--table",
               str(tmp_path / "t2"), "--mapping", str(mapping), "--quiet", check=False)
    assert p.returncode != 0 and "country" in p.stderr, p.stderr
    # not a Parquet file
    (tmp_path / "x.parquet").write_text("id,label\n1,0\n")
    p = sluice("table", "import", "--format", "parquet", "--input", str(tmp_path / "x.parquet"),
               "--table", str(tmp_path / "t3"), "--quiet", check=False)
    assert p.returncode == 1 and "not Parquet" in p.stderr, p.stderr


def test_print_mapping(tmp_path):
    path = tmp_path / "in.parquet"
    pq.write_table(sample_table(10), path)
    p = sluice("table", "import", "--format", "parquet", "--input", str(path), "--table",
               str(tmp_path / "t"), "--print-mapping")
    m = json.loads(p.stdout)
    assert m["infer"] is False
    assert m["weighted"] == [{"column": "tags", "name": "tags"}]
    assert m["sparse"] == ["item_ids"]
    assert "column 6 country: string (ignored)" in p.stderr, p.stderr
    assert "column 8 tags: list<struct{id,weight}>" in p.stderr, p.stderr
    assert not (tmp_path / "t").exists()
    # given back, it imports
    (tmp_path / "m.json").write_text(p.stdout)
    sluice("table", "import", "--format", "parquet", "--input", str(path), "--table",
           str(tmp_path / "t"), "--mapping", str(tmp_path / "m.json"), "--quiet")
    assert len(table_rows(tmp_path / "t")) == 10


def test_directory_input(tmp_path):
    d = tmp_path / "dataset"
    (d / "ds=2026-11-01").mkdir(parents=True)
    (d / "ds=2026-11-02").mkdir()
    t = sample_table(30)
    pq.write_table(t.slice(0, 10), d / "ds=2026-11-01" / "part-0.parquet")
    pq.write_table(t.slice(10, 20), d / "ds=2026-11-02" / "part-0.parquet")
    (d / "_SUCCESS").write_text("")
    (d / "ds=2026-11-01" / "README.txt").write_text("not parquet")
    (d / "ds=2026-11-02" / ".part-1.parquet.crc").write_text("hidden")
    mapping = tmp_path / "map.json"
    mapping.write_text(json.dumps(MAPPING))
    p = sluice("table", "import", "--format", "parquet", "--input", str(d), "--table",
               str(tmp_path / "t"), "--mapping", str(mapping), "--quiet")
    assert "30 rows read, 30 written" in p.stdout + p.stderr
    check_rows(table_rows(tmp_path / "t"), t)
    empty = tmp_path / "empty"
    empty.mkdir()
    p = sluice("table", "import", "--format", "parquet", "--input", str(empty), "--table",
               str(tmp_path / "t2"), "--quiet", check=False)
    assert p.returncode == 1 and "no .parquet file" in p.stderr
