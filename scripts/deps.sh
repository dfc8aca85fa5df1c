#!/usr/bin/env bash
# Dependency bootstrap: check every library with pkg-config (and each tool with
# command -v); when something is missing and we are root with apt-get, install it;
# otherwise print the exact apt-get line and stop.
# Usage: scripts/deps.sh [build|test|bench]
set -euo pipefail
mode=${1:-build}

# pkg-config module -> Debian package
declare -A PC=(
  [jansson]=libjansson-dev
  [libcurl]=libcurl4-openssl-dev
  [openssl]=libssl-dev
  [libevent]=libevent-dev
  [libevent_pthreads]=libevent-dev
  [openblas]=libopenblas-dev
  [cairo]=libcairo2-dev
  [cmocka]=libcmocka-dev
)
# tool -> Debian package
declare -A TOOLS=([cmake]=cmake [pkg-config]=pkg-config [cc]=gcc [make]=make [curl]=curl)
if [ "$mode" = test ]; then
  TOOLS[clang]=clang
  TOOLS[python3]=python3
  TOOLS[chromium]=chromium # headless: the HTML report's load test
  TOOLS[valgrind]=valgrind # serve under memcheck (tests/integration/serve_valgrind.sh)
  TOOLS[promtool]=prometheus # the proxy's rules (tests/integration/proxy_rules.sh); starts no daemon
  # A one-node Slurm cluster the test starts itself (tests/integration/slurm_shards.sh)
  TOOLS[slurmctld]=slurmctld
  TOOLS[slurmd]=slurmd
  TOOLS[sbatch]=slurm-client
  TOOLS[munged]=munge
fi

missing=()
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
for tool in "${!TOOLS[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${TOOLS[$tool]}")
done
if command -v pkg-config >/dev/null 2>&1; then
  for mod in "${!PC[@]}"; do
    pkg-config --exists "$mod" || missing+=("${PC[$mod]}")
  done
else
  for mod in "${!PC[@]}"; do missing+=("${PC[$mod]}"); done
fi
if [ "$mode" = bench ]; then
  # bench_client measures a Python aiohttp client beside ours, with Debian's python3.
  /usr/bin/python3 -c 'import aiohttp' >/dev/null 2>&1 || missing+=(python3-aiohttp)
fi
if [ "$mode" = test ]; then
  # the Kubernetes manifests parsed as YAML (tests/integration/deploy_manifests.sh)
  /usr/bin/python3 -c 'import yaml' >/dev/null 2>&1 || missing+=(python3-yaml)
  # libFuzzer and sanitizer runtimes for clang
  [ -e /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a ] ||
    ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 ||
    missing+=(libclang-rt-14-dev)
fi

[ ${#missing[@]} -eq 0 ] && exit 0
# de-duplicate, stable order
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
line="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq </dev/null >&2
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends ${missing[*]} </dev/null >&2
  exit 0
fi
echo "deps: missing packages: ${missing[*]}" >&2
echo "deps: run as root: apt-get update && $line" >&2
exit 1
