"""The ctypes Structures of sluice._native must match the C headers byte for
byte: compile a small C program against include/ that prints every struct's
size and every field's offset, and compare with ctypes. Needs no library and
no worker, only a C compiler (skipped without one)."""

import ctypes
import os
import shutil
import subprocess

import pytest

from sluice import _native

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _c_program():
    lines = [
        "#include <stddef.h>",
        "#include <stdio.h>",
        '#include "sluice/trainer.h"',
        "int main(void) {",
    ]
    for cname, st in _native.STRUCTS.items():
        lines.append('  printf("%s %%zu %%zu\\n", sizeof(%s), _Alignof(%s));' % (cname, cname, cname))
        for fname, _ in st._fields_:
            lines.append(
                '  printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (cname, fname, cname, fname)
            )
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("layout")
    src, exe = d / "layout.c", d / "layout"
    src.write_text(_c_program())
    subprocess.run(
        [cc, "-std=c11", "-D_GNU_SOURCE", "-I", os.path.join(ROOT, "include"), str(src), "-o", str(exe)],
        check=True,
    )
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    layout = {}
    for line in out.splitlines():
        parts = line.split()
        layout[parts[0]] = tuple(int(x) for x in parts[1:])
    return layout


@pytest.mark.parametrize("cname", sorted(_native.STRUCTS))
def test_struct_matches_header(c_layout, cname):
    st = _native.STRUCTS[cname]
    assert c_layout[cname] == (ctypes.sizeof(st), ctypes.alignment(st)), cname
    for fname, _ in st._fields_:
        assert c_layout["%s.%s" % (cname, fname)] == (getattr(st, fname).offset,), (cname, fname)


def test_every_field_of_the_header_is_mirrored(c_layout):
    # The sizes matching already rules out a missing trailing field; this
    # checks the field count of the two structs a trainer reads most against
    # the header text, so a field added in the middle is noticed too.
    hdr = open(os.path.join(ROOT, "include", "sluice", "tensor.h")).read()
    body = hdr[hdr.index("typedef struct sl_batch {") : hdr.index("} sl_batch_t;")]
    decls = [l for l in body.splitlines()[1:] if ";" in l.split("/*")[0]]
    # release is a function pointer declared over one line: count it once.
    assert len(decls) == len(_native.sl_batch_t._fields_)
