#!/usr/bin/env bash
# Install Triton's perf_analyzer 2.50 (the binary inside the tritonclient 2.50 wheel) in a venv of its own, never in
# the project's .venv, and write DIR/perf_analyzer: a wrapper that finds the CUDA runtime library the binary links
# (it runs on CPU-only machines; it needs libcudart.so.12 only to load). tests/http/test_perf_analyzer.py runs the
# wrapper when it is there. Later wheels ship a binary that needs glibc 2.38; 2.50 runs on Debian 12 (glibc 2.36).
#
#   bash scripts/perf_analyzer.sh [DIR]       # default DIR: ~/.cache/cascadeserve/perf-analyzer-2.50
set -euo pipefail
DIR=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/cascadeserve/perf-analyzer-2.50}
PY=${PYTHON:-python3}
if [ -x "$DIR/perf_analyzer" ] && "$DIR/perf_analyzer" --version >/dev/null 2>&1; then
  echo "$DIR/perf_analyzer"
  exit 0
fi
# the binary links libb64 (Debian's libb64-0d); as root, install it, else say what is missing
if ! ldconfig -p | grep -q 'libb64\.so\.0d'; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq libb64-0d >/dev/null
  else
    echo "perf_analyzer needs libb64.so.0d: apt-get install libb64-0d (as root)" >&2
    exit 1
  fi
fi
mkdir -p "$DIR"
"$PY" -m venv "$DIR/venv"
"$DIR/venv/bin/pip" download -q --no-deps -d "$DIR/wheels" tritonclient==2.50.0
"$DIR/venv/bin/pip" install -q "$DIR/wheels/tritonclient-2.50.0-py3-none-manylinux1_x86_64.whl[grpc,http]" \
  nvidia-cuda-runtime-cu12
cat >"$DIR/perf_analyzer" <<EOF
#!/usr/bin/env bash
LIB=\$("$DIR/venv/bin/python" -c 'import nvidia.cuda_runtime as m; print(list(m.__path__)[0])')/lib
LD_LIBRARY_PATH=\$LIB\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec "$DIR/venv/bin/perf_analyzer" "\$@"
EOF
chmod +x "$DIR/perf_analyzer"
"$DIR/perf_analyzer" --version >/dev/null 2>&1 || { echo "$DIR/perf_analyzer does not run" >&2; exit 1; }
echo "$DIR/perf_analyzer"
