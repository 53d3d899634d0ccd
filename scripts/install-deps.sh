#!/usr/bin/env bash
# Installs what qconform needs to build and test, and nothing when everything is present.
# Debian packages through apt-get (as root, or through sudo), Python test peers through pip.
set -euo pipefail

debian_packages=(
  cmake g++ make git pkg-config ccache
  clang libclang-rt-dev            # libFuzzer target
  libfmt-dev nlohmann-json3-dev libcli11-dev libssl-dev libhwy-dev
  libgtest-dev libgmock-dev libbenchmark-dev libboost-math-dev libeigen3-dev
  libdnnl-dev                      # oneDNN, the vendor int8 path on the CPU (optional in the build)
  openmpi-bin libopenmpi-dev       # MPI: multi-rank verify/predict/replay and their tests (optional in the build)
  libjs-chart.js                   # charts inlined into report.html
  chromium                         # the report's browser test
  python3 python3-pip
)
python_modules=(numpy ml_dtypes safetensors sklearn scipy pytest nanobind scikit_build_core)
pip_names=(numpy ml_dtypes safetensors scikit-learn scipy pytest nanobind scikit-build-core)

missing=()
for pkg in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "install-deps: apt-get install ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

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
