#!/usr/bin/env bash
# Installs what qconform needs, and nothing when everything is present.
#   scripts/install-deps.sh build   what `make demo` needs: the compiler, the libraries the build's
#                                   find_package calls load (and what their CMake configs load in
#                                   turn), Chart.js for the report
#   scripts/install-deps.sh test    build + what `make test` needs: GoogleTest, Google Benchmark, the
#                                   fuzzer's clang, Chromium for the report's browser test, the
#                                   Python peers and the binding's toolchain (default)
# Debian packages through apt-get (as root, or through sudo), Python test peers through pip.
set -euo pipefail
group=${1:-test}
[[ $group == build || $group == test ]] || { echo "install-deps: unknown group '$group' (expected build or test)" >&2; exit 2; }

build_packages=(
  cmake g++ make git pkg-config ccache
  libfmt-dev nlohmann-json3-dev libcli11-dev libssl-dev libhwy-dev libboost-math-dev libeigen3-dev
  libdnnl-dev                      # oneDNN, the vendor int8 path on the CPU (optional in the build)
  ocl-icd-opencl-dev               # Debian's dnnl-config.cmake loads OpenCL (only a Recommends of libdnnl-dev)
  libjs-chart.js                   # charts inlined into report.html
)
test_packages=(
  clang libclang-rt-dev            # libFuzzer target
  libgtest-dev libgmock-dev libbenchmark-dev
  openmpi-bin libopenmpi-dev       # MPI: multi-rank verify/predict/replay and their tests (optional in the build)
  chromium                         # the report's browser test
  python3 python3-pip python3-dev  # the peer tests and the nanobind extension (headers)
)
python_modules=(numpy ml_dtypes safetensors sklearn scipy pytest nanobind scikit_build_core)
pip_names=(numpy ml_dtypes safetensors scikit-learn scipy pytest nanobind scikit-build-core)

debian_packages=("${build_packages[@]}")
[[ $group == test ]] && debian_packages+=("${test_packages[@]}")

missing=()
for pkg in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "install-deps: apt-get install ${missing[*]}" >&2
  # A mirror caught mid-sync fails now and then: up to three tries before giving up.
  for try in 1 2 3; do
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >&2 && break
    ((try < 3)) || { echo "install-deps: apt-get failed 3 times" >&2; exit 1; }
    echo "install-deps: apt-get failed (try $try); again in 30 s" >&2
    sleep 30
  done
fi

[[ $group == test ]] || exit 0
python=${PYTHON:-python3}
missing_py=()
for i in "${!python_modules[@]}"; do
  "$python" -c "import ${python_modules[$i]}" 2>/dev/null || missing_py+=("${pip_names[$i]}")
done
if ((${#missing_py[@]})); then
  echo "install-deps: pip install ${missing_py[*]}" >&2
  "$python" -m pip install -q "${missing_py[@]}" >&2 ||
    "$python" -m pip install -q --break-system-packages "${missing_py[@]}" >&2
fi
