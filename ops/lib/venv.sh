# Sourced by ops/torchrec-venv and ops/bench-venv (not run): a cached Python
# virtual environment with exactly the packages of a pinned requirements
# file, installed with `pip install --no-deps --only-binary=:all:`. It lives
# outside the checkout, in a directory keyed by the hash of that file, the
# Python version and $venv_key_extra, so it is built once per machine and
# rebuilt only when those change (older ones of the same name are removed
# then). A marker written last, after $venv_check ran in it, tells a ready
# environment from a half-built one.
#
# Set before venv_main "$@": venv_name (directory prefix and message tag),
# venv_req (the requirements file), venv_what (said while building),
# venv_check (Python source that must run in the new environment),
# optionally venv_key_extra, and a function venv_post_create, run with the
# new directory after `python -m venv` and before pip.
# Environment: SLUICE_CACHE_DIR (default ${XDG_CACHE_HOME:-~/.cache}/sluice),
# SLUICE_VENV_PYTHON (default /usr/bin/python3; Debian needs python3-venv).

venv_main() {
  local python=${SLUICE_VENV_PYTHON:-/usr/bin/python3} mode=build
  case "${1:-}" in
    "") ;;
    --path) mode=path ;;
    --check) mode=check ;;
    # the calling script's leading comment
    -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) echo "$venv_name: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac

  [ -x "$python" ] || { echo "$venv_name: no python at $python" >&2; exit 1; }
  local key cache venv marker
  key=$({ cat "$venv_req"; "$python" -c 'import sys; print(sys.version)'
          if [ -n "${venv_key_extra:-}" ]; then echo "$venv_key_extra"; fi; } | sha256sum | cut -c1-12)
  cache=${SLUICE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}
  venv=$cache/$venv_name-$key
  marker=$venv/.sluice-ready

  case "$mode" in
    path) echo "$venv"; exit 0 ;;
    check)
      if [ -f "$marker" ] && [ -x "$venv/bin/python" ]; then exit 0; fi
      echo "$venv_name: $venv is not built (run ops/$venv_name)" >&2
      exit 1 ;;
  esac

  mkdir -p "$cache"
  # One builder at a time (two ctest runs, a developer and CI on one machine).
  exec 9>"$cache/$venv_name.lock"
  flock 9
  if [ -f "$marker" ] && [ -x "$venv/bin/python" ]; then echo "$venv"; exit 0; fi

  local start old
  start=$(date +%s)
  for old in "$cache/$venv_name"-*; do
    [ -d "$old" ] && [ "$old" != "$venv" ] && { echo "$venv_name: removing $old" >&2; rm -rf "$old"; }
  done
  rm -rf "$venv"
  echo "$venv_name: building $venv ($venv_what)" >&2
  "$python" -m venv "$venv" >&2 || {
    echo "$venv_name: '$python -m venv' failed (Debian: apt-get install python3-venv)" >&2
    rm -rf "$venv"; exit 1; }
  if declare -F venv_post_create >/dev/null && ! venv_post_create "$venv"; then
    echo "$venv_name: preparing $venv failed" >&2
    rm -rf "$venv"; exit 1
  fi
  if ! "$venv/bin/python" -m pip install --disable-pip-version-check -q --no-deps \
      --only-binary=:all: -r "$venv_req" >&2; then
    echo "$venv_name: pip install -r $venv_req failed" >&2
    rm -rf "$venv"; exit 1
  fi
  if ! "$venv/bin/python" - <<<"$venv_check" >&2; then
    echo "$venv_name: the new environment fails its check (ops/$venv_name)" >&2
    rm -rf "$venv"; exit 1
  fi
  touch "$marker"
  echo "$venv_name: ready in $(($(date +%s) - start)) s, $(du -sh "$venv" | cut -f1)" >&2
  echo "$venv"
}
