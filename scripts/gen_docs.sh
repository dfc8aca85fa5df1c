#!/usr/bin/env bash
# Regenerate the references in docs/reference/ that the program prints from its own tables:
#   cli.md      every command's options (stallscope help --markdown: the tables --help prints)
#   metrics.md  every figure's names (stallscope metrics --markdown: src/analysis/metric.c)
# tests/integration/cli_doc.sh and metrics_doc.sh fail while a file differs from its output.
# usage: scripts/gen_docs.sh [STALLSCOPE_BINARY]   (default: build/stallscope)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/stallscope}
[ -x "$bin" ] || { echo "gen_docs.sh: no $bin (build first: make build)" >&2; exit 2; }
for doc in cli metrics; do
  case $doc in
    cli) args=(help --markdown) ;;
    metrics) args=(metrics --markdown) ;;
  esac
  tmp=$root/docs/reference/.$doc.md.tmp
  "$bin" "${args[@]}" >"$tmp" || { rm -f "$tmp"; echo "gen_docs.sh: $bin ${args[*]} failed" >&2; exit 1; }
  mv "$tmp" "$root/docs/reference/$doc.md"
  echo "wrote docs/reference/$doc.md"
done
