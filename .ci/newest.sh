#!/usr/bin/env bash
# The newest versions pyproject allows: resolve them (a dry run, nothing installed); if any differs
# from .ci/constraints.txt (what the main run used), install them into a fresh venv and run the
# README's test command there too. A new numpy/scipy/dask release then fails CI here, not a user.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m pip install -q --dry-run --ignore-installed --report "$work/newest.json" torch==2.13.0 "$repo[test]" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
drift="$(python3 - "$work/newest.json" "$repo/.ci/constraints.txt" <<'PY'
import json, re, sys
newest = {p["metadata"]["name"].lower().replace("_", "-"): p["metadata"]["version"]
          for p in json.load(open(sys.argv[1]))["install"]}
pinned = {}
for line in open(sys.argv[2]):
    m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line.strip())
    if m:
        pinned[m.group(1).lower().replace("_", "-")] = m.group(2)
print(" ".join(f"{n}:{pinned.get(n)}->{v}" for n, v in sorted(newest.items())
               if n not in ("speccheck", "pip", "setuptools", "wheel") and pinned.get(n) != v))
PY
)"
if [ -z "$drift" ]; then
    echo "newest allowed versions = .ci/constraints.txt: the main test run covered them"
    exit 0
fi
echo "newer than .ci/constraints.txt: $drift; running the tests on them"
python3 -m venv "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
python -m pip install -q --upgrade --upgrade-strategy eager torch==2.13.0 -e "$repo[test]"
cd "$repo"
python -m pytest -q -p no:cacheprovider
