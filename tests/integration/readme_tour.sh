#!/usr/bin/env bash
# The README's tour runs top to bottom as printed (issue 28, point 1): after `make run` has
# written out/run, every line of the tour's block exits 0, in one directory, with only the
# substitutions py/readme_tour.py lists at its top (the built binary for `stallscope`; the
# emulated engine for the cpu engine; `--duration 2s --inject-at 1s --warmup 500ms` on every
# `run`; a background `serve --engine emulate` on a free 127.0.0.1 port for HOST, torn down by
# its PID; a small trace for a file the line names). A line it cannot map fails the test.
# usage: readme_tour.sh STALLSCOPE_BINARY SCRATCH_DIR
set -euo pipefail
bin=$1; dir=$2
. "$(dirname "$0")/lib.bash"
src=${STALLSCOPE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
rm -rf "$dir"; mkdir -p "$dir"
timeout 600 python3 "$PY_DIR/readme_tour.py" "$bin" "$dir" "$src/README.md" "$src/Makefile"
