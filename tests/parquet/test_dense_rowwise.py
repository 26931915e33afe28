"""Labels and dense values of FLOAT columns converted a row at a time
(docs/PARQUET.md, "Columnar conversion": imp_pqc_conv_nums, 32 columns a
pass) and dense maps applied to a FLOAT column's dictionary ("Transforms at
decode"): a job over 40 nullable FLOAT dense columns (more than one pass),
dictionary and plain pages, null rates from none to all, a DOUBLE column
beside them (converted a column at a time) and a nullable label, read at
--threads 1 and 3 with transforms at decode and with --no-decode-maps,
serves the same batches, and the values of the columns without log1p are
pyarrow's own (a null filled)."""
import math
import random
import struct

import pyarrow as pa
import pyarrow.parquet as pq

from test_decode_maps import run_job

SEED = 2214
ROWS = 5000
NULLS = [0.0, 0.05, 0.3, 0.9, 1.0]


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def make_table(rng):
    def maybe(x, p):
        return None if rng.random() < p else x

    cols = {"id": pa.array(range(ROWS), pa.int64()),
            "label": pa.array([maybe(float(rng.randrange(2)), 0.1) for _ in range(ROWS)],
                              pa.float32())}
    for i in range(40):
        p = NULLS[i % len(NULLS)]
        if i < 30:  # a count: few distinct values (a dictionary)
            vals = [maybe(rng.randrange(60) * 0.25, p) for _ in range(ROWS)]
        else:  # many distinct values
            vals = [maybe(rng.random() * 1000, p) for _ in range(ROWS)]
        cols[f"D{i}"] = pa.array(vals, pa.float32())
    cols["E"] = pa.array([maybe(rng.random() * 9, 0.2) for _ in range(ROWS)], pa.float64())
    return pa.table(cols)


DENSE = [f"D{i}" for i in range(40)] + ["E"]
MAPPING = {"sample_id": "id", "labels": ["label"], "dense": DENSE, "infer": False}


def fill(i):
    return (i + 1) * 0.5


def transforms():
    out = []
    for i, d in enumerate(DENSE):
        out.append({"op": "fill_missing", "feature": d, "value": fill(i)})
        if i < 10:
            out.append({"op": "log1p", "feature": d})
    return out


def test_dense_rowwise_same_batches(tmp_path):
    print(f"seed {SEED}")
    rng = random.Random(SEED)
    t = make_table(rng)
    path = tmp_path / "in.parquet"
    # row groups of 2,000 rows, small pages; D20..D29 without a dictionary
    pq.write_table(t, path, row_group_size=2000, data_page_size=1024, write_batch_size=256,
                   use_dictionary=[c for c in t.column_names
                                   if c not in {f"D{i}" for i in range(20, 30)}],
                   compression="zstd")
    md = pq.ParquetFile(path).metadata
    cols = {md.row_group(0).column(i).path_in_schema: md.row_group(0).column(i)
            for i in range(md.num_columns)}
    assert cols["D0"].has_dictionary_page and not cols["D20"].has_dictionary_page
    source = {"parquet": str(path), "columns": MAPPING}
    spec = {"transforms": transforms()}
    runs = {}
    for threads in (1, 3):
        for flag in ([], ["--no-decode-maps"]):
            name = f"rw{threads}{len(flag)}"
            got, log = run_job(tmp_path, name, source, batch={"size": 300}, extra_spec=spec,
                               threads=threads, worker_args=flag)
            assert len(got) == (ROWS + 299) // 300, log
            # several transform threads hand batches on in any order
            runs[name] = sorted(got, key=lambda b: b["sample_ids"][0])
    first = runs["rw10"]
    for name, got in runs.items():
        assert got == first, name
    # the values of the columns without log1p: pyarrow's, a null filled
    ids = [i for b in first for i in b["sample_ids"]]
    assert ids == list(range(ROWS))
    dense = [v for b in first for v in b["dense"]["data"]]
    labels = [v for b in first for v in b["labels"]["data"]]
    assert first[0]["dense"]["names"] == DENSE
    D = len(DENSE)
    assert len(dense) == ROWS * D
    for c in range(10, D):
        src = t.column(DENSE[c]).to_pylist()
        want = [f32(fill(c)) if x is None else f32(x) for x in src]
        # (`sluice read --json` prints 9 digits: a float32 read back exactly)
        assert [f32(dense[r * D + c]) for r in range(ROWS)] == want, DENSE[c]
    assert labels == [0.0 if x is None else x for x in t.column("label").to_pylist()]
    # and log1p ran on the others (a column of nulls only: log1p of its fill)
    assert f32(dense[4]) == f32(math.log1p(fill(4)))
