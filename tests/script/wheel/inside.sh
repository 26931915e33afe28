#!/usr/bin/env bash
# ctest wheel, inside the container (ops/container/wheel-test.Containerfile:
# Debian 12, python3, python3-venv): the steps of a user who has nothing of
# sluice's build. Run as root by tests/script/wheel_test.sh:
#   inside.sh WHEEL TORCH_SITE_PACKAGES QUICKSTART.py
# 1. no compiler, no -dev package, none of the program's libraries here;
# 2. a fresh venv, `pip install WHEEL` (no index: nothing but the wheel;
#    numpy and torch are the user's own, from TORCH_SITE_PACKAGES);
# 3. the system's copies of every library the wheel vendors are deleted
#    (Debian's minimal base has a few: apt's GnuTLS, zstd, xxhash, lz4;
#    python3 brings OpenSSL), but libffi, which python's ctypes needs;
# 4. `sluice` is the venv's; `sluice demo --rows 20000` reads every sample
#    once; a `sluice worker` maps only glibc and the wheel's libraries
#    (/proc/PID/maps); the quick start trains over its two epochs; the
#    python process maps the wheel's libsluice_trainer.so and its libraries.
set -euo pipefail
wheel=$1 torch_site=$2 quickstart=$3
scale=${SLUICE_TIMEOUT_SCALE:-1}
fail() { echo "wheel (in the container): $*" >&2; exit 1; }
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT

# 1. nothing of the build
for tool in gcc cc cmake pkg-config protoc-c; do
  if command -v "$tool" >/dev/null; then fail "$tool is installed: not a machine without the build"; fi
done
dev=$(dpkg-query -W -f '${Package}\n' | grep -e '-dev$' || true)
[ -z "$dev" ] || fail "-dev packages are installed: $dev"
for lib in libmicrohttpd librdkafka libjemalloc libjansson libprotobuf-c libcurl-gnutls; do
  if ldconfig -p | grep -q "$lib\.so"; then fail "$lib is installed: $(ldconfig -p | grep "$lib\.so")"; fi
done

# 2. a fresh venv and the wheel; the user's torch and numpy through a .pth
venv=/opt/venv
python3 -m venv "$venv" || fail "python3 -m venv failed"
echo "$torch_site" >"$venv/lib/python3.11/site-packages/user-torch.pth"
timeout $((120 * scale)) "$venv/bin/pip" install --disable-pip-version-check -q --no-index "$wheel" ||
  fail "pip install $wheel failed"
site=$("$venv/bin/python" -c 'import sluice, os; print(os.path.dirname(os.path.dirname(sluice.__file__)))')
libs=$site/sluice_trainer.libs
[ -d "$libs" ] || fail "no $libs: the wheel carries no libraries"

# 3. hide the system's copies: auditwheel names libfoo.so.1.2 libfoo-HASH8.so.1.2
hidden=()
for f in "$libs"/*; do
  orig=$(basename "$f" | sed -E 's/^(lib[^.]*)-[0-9a-f]{8}(\..*)$/\1\2/')
  stem=${orig%%.so*}
  [ "$stem" = libffi ] && continue  # python's ctypes (the package loads its library with it)
  for d in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu; do
    for g in "$d/$stem".so*; do [ -e "$g" ] || [ -L "$g" ] && { rm -f "$g"; hidden+=("$g"); }; done
  done
done
ldconfig
for f in "$libs"/*; do
  stem=$(basename "$f" | sed -E 's/^(lib[^.]*)-[0-9a-f]{8}(\..*)$/\1\2/'); stem=${stem%%.so*}
  [ "$stem" = libffi ] && continue
  if ldconfig -p | grep -q " $stem\.so"; then fail "$stem is still on the library path"; fi
done
echo "wheel: $(find "$libs" -type f | wc -l) libraries in the wheel; removed from the system:" \
  "${#hidden[@]} files (${hidden[*]##*/})"

# 4. the program on the venv's PATH
export PATH=$venv/bin:$PATH
[ "$(command -v sluice)" = "$venv/bin/sluice" ] || fail "sluice on PATH is '$(command -v sluice)', not the venv's"
help=$(sluice help | head -n 1)
[ -n "$help" ] && [ "$("$venv/bin/python" -m sluice help | head -n 1)" = "$help" ] ||
  fail "sluice help printed nothing, or python -m sluice help differs from it"
work=$(mktemp -d)
timeout $((120 * scale)) sluice demo --rows 20000 >"$work/demo.log" 2>&1 ||
  fail "sluice demo failed: $(tail -n 20 "$work/demo.log")"
[ "$(grep -c 'samples  *20000 in .* every sample id exactly once' "$work/demo.log")" = 2 ] ||
  fail "sluice demo did not read 20000 samples, each once, twice: $(cat "$work/demo.log")"
grep -E 'dedup:|generated' "$work/demo.log"

# maps_check PID WHAT: every shared object PID maps is glibc's (and the
# compiler runtimes manylinux allows) or the wheel's (vendored, or its own
# sluice/libsluice_*.so)
allowed='^/(usr/)?lib/x86_64-linux-gnu/(ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libresolv\.so\.2|libgcc_s\.so\.1|libstdc\+\+\.so\.6[.0-9]*|libz\.so\.1[.0-9]*|libnss_[a-z]+\.so\.2)$|^/lib64/ld-linux-x86-64\.so\.2$'
maps_check() {
  local maps n=0 path real
  maps=$(awk '$6 ~ /\.so/ { print $6 }' "/proc/$1/maps" | sort -u)
  for path in $maps; do
    real=$(readlink -f "$path")
    case "$real" in
      "$libs"/*) n=$((n + 1)) ;;
      "$site"/sluice/libsluice_*.so) ;; # the wheel's own (what the program loads on first use)
      *) [[ "$real" =~ $allowed ]] || [[ "$path" =~ $allowed ]] || fail "$2 maps $path, neither glibc's nor the wheel's" ;;
    esac
  done
  [ "$n" -gt 0 ] || fail "$2 maps none of the wheel's libraries"
  echo "wheel: $2 maps $n libraries of the wheel, the rest glibc's"
}

# a table, a worker of the wheel's program, the quick start over two epochs
sluice table gen --preset sessions --rows 20000 --table "$work/table" --seed 5 --cluster \
  --no-sync --quiet >/dev/null || fail "sluice table gen failed"
cat >"$work/job.json" <<JSON
{"source": {"table": "$work/table"},
 "batch": {"size": 1024, "epochs": 2, "dedup_groups": {"user": ["user_id", "user_hist", "user_cat"]}}}
JSON
: >"$work/worker.log" # there before the loop reads it (the worker's redirect opens it later)
sluice worker --job "$work/job.json" --listen 127.0.0.1:0 --admin 127.0.0.1:0 --exit-when-done \
  >"$work/worker.log" 2>&1 &
pids+=($!)
addr=""
for _ in $(seq $((200 * scale))); do
  addr=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$work/worker.log" | head -n 1)
  [ -n "$addr" ] && break
  kill -0 "${pids[-1]}" 2>/dev/null || fail "worker exited: $(cat "$work/worker.log")"
  sleep 0.1
done
[ -n "$addr" ] || fail "worker did not listen within $((20 * scale)) s"
[ "$(readlink -f "/proc/${pids[-1]}/exe")" = "$site/sluice/bin/sluice" ] ||
  fail "the worker runs $(readlink -f "/proc/${pids[-1]}/exe"), not the wheel's program"
maps_check "${pids[-1]}" "sluice worker"
# libmicrohttpd (--admin) and libcurl are loaded on first use, through
# sluice/libsluice_*.so (docs/DESIGN.md "Libraries loaded on first use"):
# the worker's comes from the wheel (maps_check), and the program's HTTP
# client reaches libcurl (its own message, not a load error)
grep -q '/libmicrohttpd-[0-9a-f]*\.so' "/proc/${pids[-1]}/maps" ||
  fail "the worker with --admin maps no libmicrohttpd of the wheel: $(cat "$work/worker.log")"
jobs=$(sluice jobs list --admin 127.0.0.1:1 2>&1) && fail "sluice jobs list on a closed port succeeded"
case "$jobs" in
  *"Couldn't connect"*) echo "wheel: libcurl and libmicrohttpd load from the wheel on first use" ;;
  *) fail "sluice jobs list: $jobs" ;;
esac

(cd "$work" && timeout $((180 * scale)) "$venv/bin/python" "$quickstart" "$addr") >"$work/qs.log" 2>&1 ||
  fail "the quick start failed: $(tail -n 30 "$work/qs.log")"
cat "$work/qs.log"
grep -q '^quickstart: 40000 samples, last loss [0-9.]*$' "$work/qs.log" ||
  fail "the quick start did not train on 40000 samples (2 epochs of 20000)"
for _ in $(seq $((100 * scale))); do kill -0 "${pids[-1]}" 2>/dev/null || break; sleep 0.1; done
if kill -0 "${pids[-1]}" 2>/dev/null; then fail "the worker did not exit when its job was done"; fi

# the python process: the bundled library and its libraries from the wheel
"$venv/bin/python" - "$site" "$libs" <<'PY' || fail "python loads libraries from outside the wheel"
import os, re, sys
import sluice
site, libs = sys.argv[1], sys.argv[2]
assert sluice.library_path() == os.path.join(site, "sluice", "libsluice_trainer.so"), sluice.library_path()
maps = {l.split()[5] for l in open("/proc/self/maps") if len(l.split()) > 5 and ".so" in l.split()[5]}
for stem in ("libgnutls", "libmicrohttpd", "libprotobuf-c"):
    hits = [m for m in maps if os.path.basename(m).startswith(stem + "-") or os.path.basename(m).startswith(stem + ".")]
    assert hits and all(h.startswith(libs + "/") for h in hits), (stem, hits)
print("wheel: python maps %s and its GnuTLS, libmicrohttpd, protobuf-c from the wheel" % sluice.library_path())
PY
echo "wheel: in the container: OK"
