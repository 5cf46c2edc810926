#!/usr/bin/env bash
# Issue 12 point 4: build a wheel, install it into a fresh venv outside the checkout, and from a
# temporary directory run the smoke battery and a pytest file that uses the speccheck_battery fixture.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m pip wheel -q --no-deps --no-build-isolation -w "$work/dist" "$repo"
# issue 28.7c: research and reproduction code (research/, mpmath) stays out of the wheel
python3 - "$work"/dist/speccheck-*.whl <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
stray = [n for n in names if not n.startswith(("speccheck/", "speccheck-"))]
assert not stray, f"the wheel carries files outside the package: {stray}"
print(f"wheel: {len(names)} files, all under speccheck/")
PY
python3 -m venv "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
export PIP_DISABLE_PIP_VERSION_CHECK=1
python -m pip install -q torch==2.13.0 "$work"/dist/speccheck-*.whl pytest
mkdir "$work/run"
cd "$work/run"
python - <<'PY'
import pathlib, speccheck
where = pathlib.Path(speccheck.__file__).resolve()
assert "site-packages" in str(where), f"speccheck imported from {where}, not from the installed wheel"
print(f"speccheck from {where}")
PY
speccheck theory --delta 1 --K 2  # the theory package without mpmath or research/
speccheck battery --verifier dgrs --suite smoke --no-progress
cat > test_fixture.py <<'PY'
def test_dgrs_passes_smoke(speccheck_battery):
    outcome = speccheck_battery("dgrs", suite="smoke")
    assert outcome.verdict == "exact" and outcome.report.passed
PY
python -m pytest -q -p no:cacheprovider test_fixture.py
echo "wheel check: OK"
