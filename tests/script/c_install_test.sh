#!/usr/bin/env bash
# ctest c_install: `cmake --install` of this build into a temporary prefix,
# then examples/trainer.c (the program README.md shows, checked to be the
# same text) built outside the source tree against that prefix, once with
# pkg-config (sluice-trainer.pc) and once with CMake's find_package(sluice),
# and each program run against a real `sluice worker` of the installed
# prefix with LD_LIBRARY_PATH unset: the rpath of the .pc file and of the
# CMake package must find the installed libsluice_trainer.so.2.
# Environment: SLUICE_BUILD_DIR, SLUICE_SOURCE_DIR, SLUICE_TIMEOUT_SCALE.
set -euo pipefail
build=${SLUICE_BUILD_DIR:?} src=${SLUICE_SOURCE_DIR:?}
unset LD_LIBRARY_PATH PKG_CONFIG_PATH CMAKE_PREFIX_PATH
test=c_install
. "$(dirname "$0")/lib.sh"

prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || fail "cmake --install: $(cat "$work/install.log")"
netlibs="lib/libsluice_curl.so lib/libsluice_xml2.so lib/libsluice_microhttpd.so lib/libsluice_gnutls.so lib/libsluice_rdkafka.so"
for f in bin/sluice lib/libsluice_trainer.so lib/libsluice_trainer.so.2 include/sluice/trainer.h \
         lib/pkgconfig/sluice-trainer.pc lib/cmake/sluice/sluice-config.cmake $netlibs; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done

# libcurl, libxml2, libmicrohttpd, GnuTLS and librdkafka: not loaded at start, found through
# lib/libsluice_*.so on first use (docs/DESIGN.md "Libraries loaded
# on first use"): the installed program reaches libcurl (its
# message, not a load error) and serves an admin endpoint.
for f in $netlibs; do
  if ldd "$prefix/$f" | grep -q 'not found'; then fail "$f: $(ldd "$prefix/$f" | grep 'not found')"; fi
done
if LD_TRACE_LOADED_OBJECTS=1 "$prefix/bin/sluice" | grep -E 'libcurl|libxml2|libmicrohttpd|libgnutls|librdkafka'; then
  fail "the installed program loads a network library at start"
fi
jobs=$("$prefix/bin/sluice" jobs list --admin 127.0.0.1:1 2>&1) && fail "jobs list on a closed port succeeded"
case "$jobs" in
  *"Couldn't connect"*) ;;
  *) fail "the installed program's HTTP client: $jobs" ;;
esac
[ "$(readlink "$prefix/lib/libsluice_trainer.so")" = libsluice_trainer.so.2 ] || fail "libsluice_trainer.so is not a link to the SONAME"
soname=$(readelf -d "$prefix/lib/libsluice_trainer.so.2" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = libsluice_trainer.so.2 ] || fail "SONAME is '$soname', expected libsluice_trainer.so.2"

python3 - "$src/README.md" "$src/examples/trainer.c" <<'PY' || fail "README.md does not show examples/trainer.c as it is"
import sys
readme, example = (open(p).read() for p in sys.argv[1:])
sys.exit(0 if "```c\n" + example + "```\n" in readme else 1)
PY

app=$work/app
mkdir -p "$app"
cp "$src/examples/trainer.c" "$app/"
cd "$app"
# 1. pkg-config
PKG_CONFIG_PATH=$prefix/lib/pkgconfig cc -std=c11 -Wall -Wextra -Werror trainer.c \
  $(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs sluice-trainer) \
  -o trainer-pkgconfig || fail "cc with pkg-config failed"
# 2. find_package(sluice)
cat >CMakeLists.txt <<'CM'
cmake_minimum_required(VERSION 3.18)
project(trainer C)
find_package(sluice 0.1 REQUIRED)
add_executable(trainer trainer.c)
target_link_libraries(trainer PRIVATE sluice::trainer)
CM
cmake -S . -B build -DCMAKE_PREFIX_PATH="$prefix" >"$work/cmake.log" 2>&1 || fail "find_package: $(cat "$work/cmake.log")"
cmake --build build >>"$work/cmake.log" 2>&1 || fail "build with find_package: $(cat "$work/cmake.log")"

for prog in trainer-pkgconfig build/trainer; do
  lib=$(ldd "$prog" | sed -n 's/.*libsluice_trainer.so.2 => \([^ ]*\).*/\1/p')
  [ "$(readlink -f "$lib")" = "$(readlink -f "$prefix/lib/libsluice_trainer.so.2")" ] ||
    fail "$prog resolves libsluice_trainer.so.2 to '$lib', not the installed prefix"
done

# A real worker of the installed prefix: 5000 rows in batches of 512 give
# 9 full batches and one of 392.
"$prefix/bin/sluice" table gen --preset sessions --rows 5000 --table "$work/table" --seed 3 \
  --cluster --no-sync --quiet
cat >"$work/job.json" <<JSON
{"source": {"table": "$work/table"},
 "batch": {"size": 512, "dedup_groups": {"user": ["user_id", "user_hist", "user_cat"]}}}
JSON
"$prefix/bin/sluice" worker --job "$work/job.json" --listen 127.0.0.1:0 --admin 127.0.0.1:0 \
  >"$work/admin.log" 2>&1 &
pids+=($!)
for _ in $(seq $((200 * scale))); do
  grep -q '^admin on ' "$work/admin.log" && break
  kill -0 "${pids[-1]}" 2>/dev/null || fail "worker with --admin exited: $(cat "$work/admin.log")"
  sleep 0.1
done
grep -q '^admin on ' "$work/admin.log" || fail "worker with --admin: no admin endpoint: $(cat "$work/admin.log")"
kill "${pids[-1]}"

outputs=()
for prog in trainer-pkgconfig build/trainer; do
  start_worker "$prefix/bin/sluice" "$work/job.json" "$(basename "$prog")"
  out=$(timeout $((60 * scale)) "./$prog" "$addr") || fail "$prog failed: $out"
  echo "$prog: $out"
  case "$out" in
    "trainer: 10 batches, 5000 samples, "*" unique group rows") ;;
    *) fail "$prog printed '$out', expected 10 batches and 5000 samples" ;;
  esac
  outputs+=("$out")
  kill "${pids[-1]}"
done
[ "${outputs[0]}" = "${outputs[1]}" ] || fail "the two builds received different batches"
echo "c_install: installed prefix works with pkg-config and find_package"
