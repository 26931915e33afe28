#!/usr/bin/env bash
# ctest compare_loaders: bench/compare_loaders.py end to end at a tiny size
# with Debian's python3 (numpy and torch), so that the benchmark cannot rot:
# the sluice, DataLoader and in-memory numpy peers must hand the trainer
# loop identical tensors (the script's digest check) and finish two timed
# rounds with a summary row each; tf.data and Ray Data run when that python
# can import them, and are otherwise skipped with their message.
set -euo pipefail
test=compare_loaders
. "$(dirname "$0")/lib.sh"
src=${SLUICE_SOURCE_DIR:?}
py=/usr/bin/python3
if ! "$py" -c 'import numpy, torch' 2>/dev/null; then
  echo "compare_loaders: SKIPPED: $py cannot import numpy and torch"
  exit 77
fi
# The digest the script verifies with tells tensors apart: rows in another
# order digest the same; one id, one dense value or one label changed do not.
"$py" - "$src/bench" <<'PY' || fail "the verification digest does not tell batches apart"
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import compare_loaders as cl

rng = np.random.default_rng(7)
dense = rng.integers(0, 1000, (64, 13)).astype(np.float32)
dense[rng.random((64, 13)) < 0.2] = np.nan
labels = (rng.random(64) < 0.3).astype(np.float32)
sparse = rng.integers(0, 1 << 40, (64, 26))
sparse[rng.random((64, 26)) < 0.1] = -1


def digest(d, l, s):
    g = cl.Digest()
    g.add(cl.to_batch(d[:40], l[:40], s[:40], 1000003))
    g.add(cl.to_batch(d[40:], l[40:], s[40:], 1000003))
    return g.to_json()


ref = digest(dense, labels, sparse)
perm = rng.permutation(64)
assert cl.digest_mismatch(ref, digest(dense[perm], labels[perm], sparse[perm])) is None
s2 = sparse.copy(); s2[5, 3] = s2[5, 3] + 1 if s2[5, 3] >= 0 else 0
d2 = dense.copy(); d2[9, 2] = 1e4
l2 = labels.copy(); l2[11] = 1 - l2[11]
for bad in ((dense, labels, s2), (d2, labels, sparse), (dense, l2, sparse)):
    assert cl.digest_mismatch(ref, digest(*bad)) is not None
PY
out=$work/out.txt
# 6,000 rows in batches of 512 over 2 files: partial batches at each file's end.
"$py" "$src/bench/compare_loaders.py" --sluice "$SLUICE_BINARY" --rows 6000 --batch 512 \
  --table-size 100003 --workers 2 --rounds 2 --timeout $((120 * scale)) >"$out" 2>&1 ||
  fail "exited $?: $(cat "$out")"
cat "$out"
peers=(sluice dataloader numpy)
has() { "$py" -c "import importlib.util, sys; sys.exit(0 if all(importlib.util.find_spec(m) for m in sys.argv[1:]) else 1)" "$@"; }
if has tensorflow; then peers+=(tf-tsv tf-tfrecord); else
  grep -q "^tf-tsv: skipped: .*cannot import tensorflow" "$out" || fail "no skip message for tf-tsv"
  grep -q "^tf-tfrecord: skipped: .*cannot import tensorflow" "$out" || fail "no skip message for tf-tfrecord"
fi
if has ray pyarrow; then peers+=(ray); else
  grep -q "^ray: skipped: .*cannot import" "$out" || fail "no skip message for ray"
fi
grep -Eq "^verified: ${#peers[@]} peers handed the trainer identical tensors in every round" "$out" ||
  fail "not verified for ${#peers[@]} peers"
for p in "${peers[@]}"; do
  [ "$(grep -Ec "^  $p +[0-9]+ samples/s .* digest [0-9a-f]{16}$" "$out")" = 2 ] ||
    fail "$p: not 2 verified, timed rounds"
done
rows=$(grep -c '^| [^-]' "$out")
[ "$rows" = $((${#peers[@]} + 1)) ] || fail "summary table: $rows rows, want header + ${#peers[@]}"
echo "compare_loaders: ok (${peers[*]})"
