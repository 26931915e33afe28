"""What `sluice parquet cat` must print for a Parquet file, computed from
what pyarrow reads, and the comparison of the two value by value (used by
test_writers.py and make_fixtures.py). sluice's naming: a top-level column
by its name, a struct's fields as "a.b", a list by the list's name, the
fields of a list of structs as "list.field" (parallel lists)."""
import json
import math
import os
import struct
import subprocess

import pyarrow as pa

SLUICE = os.environ.get("SLUICE_BINARY", "build/sluice")


def sluice(*args, check=True):
    """Run `sluice ARGS`; @return the CompletedProcess (text)."""
    p = subprocess.run([SLUICE, *args], capture_output=True, text=True, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"sluice {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p


def sluice_rows(path, *args):
    """The rows `sluice parquet cat` prints, parsed."""
    out = sluice("parquet", "cat", str(path), *args).stdout
    return [json.loads(line) for line in out.splitlines()]


def _plain(v, t):
    """A pyarrow Python value as sluice prints it."""
    if v is None:
        return None
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return v.hex()
    if pa.types.is_floating(t):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
    return v


def _numeric(arr):
    """Timestamps, dates and times as the integers stored."""
    t = arr.type
    if pa.types.is_timestamp(t) or pa.types.is_time64(t) or pa.types.is_duration(t):
        return arr.cast(pa.int64())
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return arr.cast(pa.int32())
    if pa.types.is_dictionary(t):
        return arr.dictionary_decode()
    return arr


def expected_columns(table):
    """{name: [value per row]} as sluice names and prints them."""
    cols = {}

    def add(name, arr):
        arr = _numeric(arr)
        t = arr.type
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                f = arr.field(i)
                # a null struct makes its fields null
                if arr.null_count:
                    f = pa.compute.if_else(arr.is_null(), pa.nulls(len(arr), f.type), f)
                add(f"{name}.{t.field(i).name}", f)
            return
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            vt = t.value_type
            if pa.types.is_struct(vt):
                offsets = arr.offsets.to_pylist()
                valid = arr.is_valid().to_pylist()
                for i in range(vt.num_fields):
                    f = _numeric(arr.values.field(i))
                    if arr.values.null_count:
                        f = pa.compute.if_else(arr.values.is_null(), pa.nulls(len(f), f.type), f)
                    fl = [_plain(x, f.type) for x in f.to_pylist()]
                    cols[f"{name}.{vt.field(i).name}"] = [
                        fl[offsets[r]:offsets[r + 1]] if valid[r] else None
                        for r in range(len(arr))]
                return
            inner = _numeric(arr.values)
            fl = [_plain(x, inner.type) for x in inner.to_pylist()]
            offsets = arr.offsets.to_pylist()
            valid = arr.is_valid().to_pylist()
            cols[name] = [fl[offsets[r]:offsets[r + 1]] if valid[r] else None
                          for r in range(len(arr))]
            return
        cols[name] = [_plain(x, t) for x in arr.to_pylist()]

    for name in table.column_names:
        add(name, table.column(name).combine_chunks())
    return cols


def float_types(table):
    """Names of float32 columns (compared as float32)."""
    out = set()

    def walk(name, t):
        if pa.types.is_struct(t):
            for f in t:
                walk(f"{name}.{f.name}", f.type)
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            vt = t.value_type
            if pa.types.is_struct(vt):
                for f in vt:
                    walk(f"{name}.{f.name}", f.type)
            else:
                walk(name, vt)
        elif t == pa.float32():
            out.add(name)

    for f in table.schema:
        walk(f.name, f.type)
    return out


def _f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _same(a, b, single):
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(
            _same(x, y, single) for x, y in zip(a, b))
    if isinstance(b, bool) or isinstance(a, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if single:
            return _f32(float(a)) == _f32(float(b))
        return a == b
    return a == b


def compare(path, table, rows=None):
    """Assert `sluice parquet cat path` equals table (pyarrow's read of
    path) value by value; @return the number of rows compared."""
    if rows is None:
        rows = sluice_rows(path)
    want = expected_columns(table)
    singles = float_types(table)
    assert len(rows) == table.num_rows, f"{path}: sluice printed {len(rows)} rows, pyarrow " \
                                        f"read {table.num_rows}"
    for r, row in enumerate(rows):
        assert list(row) == list(want), f"{path} row {r}: keys {list(row)}, want {list(want)}"
        for name, vals in want.items():
            if not _same(row[name], vals[r], name in singles):
                raise AssertionError(f"{path} row {r} column {name}: sluice {row[name]!r}, "
                                     f"pyarrow {vals[r]!r}")
    return len(rows)
