#!/usr/bin/env bash
# The test suite, in stages. Some tests need something from outside the
# repository: a SLURM cluster, slurmrestd, Chromium, daisy 2.0.0 in a Python,
# root with iproute2. Run on their own without it, such a test fails, saying
# what it needs; it never passes without running. This script finds out what
# is here, leaves out the tests whose requirements are missing (nextest
# counts them as skipped in its own summary) and names them loudly. With CI
# set, a missing requirement fails the run instead.
#
#   bash ci/test.sh [nextest run options...]    e.g. --no-fail-fast
#
# Stages: the Python package is built once, as a wheel (target/wheels), and
# that wheel is installed into three virtual environments, each made if
# missing and reused otherwise: the tests' (DAISY_TEST_VENV, default
# target/python-venv, with pytest and daisy 2.0.0 from PyPI, which is also
# the daisy2 Python unless DAISY2_PYTHON says otherwise) and one for each
# real daisy client the Python tests run on this engine, with that client
# and its dependencies from PyPI and no daisy (DAISY_VOLARA_VENV, default
# target/compat-volara-venv, volara 1.0.5; DAISY_GUNPOWDER_VENV, default
# target/compat-gunpowder-venv, gunpowder 1.4.4, which needs zarr 2 where
# volara needs zarr 3); the requirements are checked; the Rust tests run
# (cargo nextest); the Python tests run (pytest, python/tests, which skip
# with the reason, or fail under CI, where SLURM is missing).
#
# Requirements and where they come from:
#   SLURM         `sinfo -h` answers (and python3, for the LSF stand-in)
#   slurmrestd    SLURMRESTD_URL (default http://127.0.0.1:6820) accepts connections
#   SlurmQos      SLURM enforces limits and has the QOS daisy-two-jobs
#                 (MaxSubmitJobsPerUser=2, account daisy)
#   SlurmArrays   SLURM's MaxArraySize is at most 14 (a test submits more
#                 workers than that)
#   SlurmNodes    SLURM has 3 nodes or more (DAISY_SLURM_NODES=3)
#   Chromium      DAISY_CHROMIUM, else `chromium` on PATH
#   daisy2        DAISY2_PYTHON: a Python in which `import daisy` is 2.0.0
#   netns         root, and `ip netns` (iproute2)
set -euo pipefail
cd "$(dirname "$0")/.."

REQUIREMENTS=(SLURM slurmrestd SlurmQos SlurmArrays SlurmNodes Chromium daisy2 netns)
# The tests of each requirement, as nextest filtersets (by test binary or
# module: a new test in one of these modules is covered without a change).
E2E='binary_id(daisy-driver::e2e)'
declare -A TESTS=(
  [SLURM]="binary_id(launchers::slurm) | binary_id(launchers::lsf) | ($E2E & test(/^((cluster|plan_cluster|preemption::slurm)::|programs::cluster_|resource_slots::cluster_)/))"
  [slurmrestd]="binary_id(launchers::slurmrestd) | ($E2E & test(/^cluster::slurmrestd::/))"
  [SlurmQos]="((binary_id(launchers::slurm) | binary_id(launchers::slurmrestd)) & test(/qos_limit|waiting_worker_cancelled/)) | ($E2E & test(/^cluster::site_limits::a_task_over_its_qos/))"
  [SlurmArrays]="$E2E & test(/^cluster::site_limits::an_array_larger/)"
  [SlurmNodes]="$E2E & test(/^cluster::workers_per_job::multinode::/)"
  [Chromium]="$E2E & test(/^(report::chromium|browser|dashboard::chromium)::/)"
  [daisy2]="$E2E & test(/^daisy2_compat::/)"
  [netns]="$E2E & test(/^netns::/)"
)
declare -A HOW=(
  [SLURM]="start one as root: DAISY_SLURM_RESTD=1 bash ci/slurm/start-local-slurm.sh; source /tmp/daisy-slurm/env.sh"
  [slurmrestd]="start SLURM with DAISY_SLURM_RESTD=1 (above), or set SLURMRESTD_URL"
  [SlurmQos]="start SLURM with accounting: DAISY_SLURM_ACCOUNTING=1 DAISY_SLURM_RESTD=1 bash ci/slurm/start-local-slurm.sh"
  [SlurmArrays]="start SLURM with small arrays: DAISY_SLURM_MAX_ARRAY_SIZE=8 (and the variables above) bash ci/slurm/start-local-slurm.sh"
  [SlurmNodes]="start SLURM with three nodes: DAISY_SLURM_NODES=3 (and the variables above) bash ci/slurm/start-local-slurm.sh"
  [Chromium]="apt-get install chromium, or set DAISY_CHROMIUM"
  [daisy2]="set DAISY2_PYTHON to a Python with daisy==2.0.0 from PyPI installed"
  [netns]="run as root with iproute2 installed"
)

have_slurm() {
  sinfo -h >/dev/null 2>&1 && command -v python3 >/dev/null
}

have_slurmrestd() {
  local address=${SLURMRESTD_URL:-http://127.0.0.1:6820}
  address=${address#http://}
  address=${address%%/*}
  timeout 2 bash -c "exec 3<>/dev/tcp/${address%:*}/${address##*:}" 2>/dev/null
}

have_slurmqos() {
  have_slurm || return 1
  # Read whole, then matched: `scontrol | grep -q` fails under pipefail
  # whenever grep quits before scontrol has written everything (SIGPIPE).
  local config
  config=$(scontrol show config 2>/dev/null) || return 1
  [ "$(sacctmgr -n -P show qos daisy-two-jobs format=maxsubmitjobsperuser 2>/dev/null)" = 2 ] &&
    grep -q '^AccountingStorageEnforce *=.*limits' <<<"$config"
}

have_slurmarrays() {
  have_slurm || return 1
  [ "$(scontrol show config 2>/dev/null | awk '$1 == "MaxArraySize" {print $3}')" -le 14 ] 2>/dev/null
}

have_slurmnodes() {
  have_slurm || return 1
  [ "$(sinfo -h -N -o %N 2>/dev/null | sort -u | wc -l)" -ge 3 ]
}

have_chromium() {
  [ -n "${DAISY_CHROMIUM:-}" ] || command -v chromium >/dev/null
}

have_daisy2() {
  [ -n "${DAISY2_PYTHON:-}" ] &&
    "$DAISY2_PYTHON" -c 'import importlib.metadata as m; assert m.version("daisy") == "2.0.0"' \
      2>/dev/null
}

have_netns() {
  [ "$(id -u)" = 0 ] && ip netns list >/dev/null 2>&1
}

# Sets MISSING to the requirements that are not met and have tests.
MISSING=()
check_requirements() {
  local requirement
  for requirement in "${REQUIREMENTS[@]}"; do
    if ! "have_${requirement,,}" && [ -n "$(tests_of "$requirement")" ]; then
      MISSING+=("$requirement")
    fi
  done
}

tests_of() {
  cargo nextest list --workspace -E "${TESTS[$1]}" 2>/dev/null | grep -v '^\s*$' || true
}

# Names what is left out, or fails under CI.
report_missing() {
  local requirement verdict="these tests are SKIPPED"
  [ -n "${CI:-}" ] && verdict="CI is set, so these tests may not be skipped"
  for requirement in "${MISSING[@]}"; do
    echo "!!!!!!!! $requirement is missing (${HOW[$requirement]}); $verdict:"
    tests_of "$requirement" | sed 's/^/!!!!!!!!     /'
  done
  if [ -n "${CI:-}" ] && [ "${#MISSING[@]}" -gt 0 ]; then
    echo "ci/test.sh: missing under CI: ${MISSING[*]}" >&2
    exit 1
  fi
}

# Every Rust test but those of the missing requirements.
rust_tests() {
  local excluded=() requirement
  for requirement in "${MISSING[@]}"; do
    excluded+=("(${TESTS[$requirement]})")
  done
  if [ "${#excluded[@]}" -eq 0 ]; then
    cargo nextest run --workspace "$@"
  else
    local IFS='|'
    cargo nextest run --workspace -E "not (${excluded[*]})" "$@"
  fi
}

pip_in() {
  local venv=$1
  shift
  "$venv/bin/python" -m pip -q --disable-pip-version-check "$@"
}

# Builds the package and installs it with its test extras, and into the
# real clients' environments. The dev profile reuses what the Rust tests
# compiled (a release build would compile every dependency again); speed is
# measured by python/bench, not by the tests. One wheel for all three, so the
# Rust part is compiled once.
python_env() {
  VENV=${DAISY_TEST_VENV:-target/python-venv}
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  VENV=$(cd "$VENV" && pwd)
  rm -f target/wheels/daisy_rs-*.whl # the version stays 0.1.0: never an old build
  MATURIN_PEP517_ARGS="--profile dev" pip_in "$VENV" wheel --no-deps ./python -w target/wheels
  WHEEL=$(echo target/wheels/daisy_rs-*.whl)
  # pip counts an installed 0.1.0 as this wheel: the extras' dependencies
  # first, then the wheel over whatever build is there.
  pip_in "$VENV" install "$WHEEL[test]"
  pip_in "$VENV" install --force-reinstall --no-deps "$WHEEL"
  export DAISY2_PYTHON=${DAISY2_PYTHON:-$VENV/bin/python}
  client_env DAISY_VOLARA_PYTHON "${DAISY_VOLARA_VENV:-target/compat-volara-venv}" volara 1.0.5
  client_env DAISY_GUNPOWDER_PYTHON "${DAISY_GUNPOWDER_VENV:-target/compat-gunpowder-venv}" gunpowder 1.4.4
}

# A real client's environment, named to the tests in $1: the client at its
# version, nothing extra, and no daisy distribution (volara pulls daisy 1.2.3
# in; the switch wins over it, but then a test could pass on the real daisy
# where the switch failed), with the wheel (its dependencies once, then the
# wheel over whatever build is there).
client_env() {
  local variable=$1 venv=$2 client=$3 version=$4
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  venv=$(cd "$venv" && pwd)
  "$venv/bin/python" -c "import importlib.metadata as m; assert m.version('$client') == '$version'" \
    2>/dev/null || pip_in "$venv" install "$client==$version"
  if "$venv/bin/python" -m pip show daisy >/dev/null 2>&1; then
    pip_in "$venv" uninstall -y daisy
  fi
  pip_in "$venv" install "$WHEEL"
  pip_in "$venv" install --force-reinstall --no-deps "$WHEEL"
  export "$variable=$venv/bin/python"
}

echo "== requirements of the tests"
cargo nextest list --workspace >/dev/null # builds the tests once, up front

echo "== Python package (maturin), built once, in the virtual environments"
python_env

check_requirements
report_missing

echo "== Rust tests (cargo nextest)"
status=0
rust_tests "$@" || status=$?

echo "== Python tests (pytest)"
"$VENV/bin/pytest" python/tests -q -rs || status=$?

if [ "${#MISSING[@]}" -gt 0 ]; then
  # nextest counts whole binaries it left out as one line ("3 binaries
  # skipped"), not their tests: the true number, by requirement, is here.
  left_out=0 by_requirement=()
  for requirement in "${MISSING[@]}"; do
    count=$(tests_of "$requirement" | grep -c . || true)
    left_out=$((left_out + count))
    by_requirement+=("$requirement: $count")
  done
  summary=$(printf '%s, ' "${by_requirement[@]}")
  summary=${summary%, }
  echo "!!!!!!!! $left_out Rust tests NOT RUN, for want of ${MISSING[*]} ($summary): see the list above"
fi
exit $status
