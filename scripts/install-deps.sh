#!/usr/bin/env bash
# Installs every build, test and tooling dependency of infera from Debian 12's
# packages. Idempotent; needs root (or sudo). Used by the README and .ci/run.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config git
  # C++ libraries
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev libpcre2-dev
  # KV offload tiers: Redis client, XXH3 checksums; redis-server for the tests
  libhiredis-dev libxxhash-dev redis-server
  libboost-dev  # Beast/Asio (header-only): the HTTP server and bench-serve
  # BLAS + LAPACK: the Hessians and Cholesky factors of GPTQ / SparseGPT
  libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # fuzzing (libFuzzer + sanitizers come with clang's runtime); clang-format:
  # scripts/check_format.sh
  clang libclang-rt-14-dev clang-format
  # tooling and independent references in tests (Debian's interpreter);
  # pybind11: the Python API (python/)
  python3 python3-numpy python3-pybind11
  # a JSON Schema validator: checks constrained outputs in tests/e2e
  python3-jsonschema
  # Jinja2: the reference renderer chat-template tests compare infera with
  python3-jinja2
  # PyTorch: tools/train/distill.py (pruning recovery) and its test;
  # OpenBLAS so Debian's torch does not fall back to the reference BLAS
  python3-torch libopenblas0-pthread
  # Prometheus server + promtool: metrics and alert-rule tests
  prometheus
  # Open MPI: tensor / pipeline parallelism across processes and hosts;
  # iproute2: the multi-host test's network namespaces
  libopenmpi-dev openmpi-bin iproute2
  # nginx: the load balancer in front of replicas (tests/e2e/test_deploy.py);
  # curl: deploy/systemd/rolling-restart.sh polls /ready with it
  nginx curl
  # Chromium: the web chat page's end-to-end test drives Debian's browser
  # headless with playwright-core (tests/e2e/js; no browser is downloaded)
  chromium
)

# Node.js + npm run the official OpenAI client in the server's end-to-end
# tests; any recent Node.js will do (Debian's if none is installed).
if ! command -v npm >/dev/null 2>&1; then PKGS+=(nodejs npm); fi
# kubectl renders the Kubernetes manifests (`kubectl kustomize`, in
# tests/deploy); any kubectl will do (Debian's, with kustomize 2.0, if none).
if ! command -v kubectl >/dev/null 2>&1; then PKGS+=(kubernetes-client); fi

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present" >&2
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
