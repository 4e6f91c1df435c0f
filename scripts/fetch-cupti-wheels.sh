#!/usr/bin/env bash
# Download the real libcupti (CUDA 12.9 and 13.5) from PyPI wheels into
# target/cupti-wheels/, for the tests that run the agent against the real
# library on a machine without a GPU. Optional: those tests skip (saying
# so) when the libraries are absent.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=target/cupti-wheels
mkdir -p "$dest"
for spec in nvidia-cuda-cupti==13.5.25 nvidia-cuda-cupti-cu12==12.9.79; do
    python3 -m pip download --quiet --no-deps -d "$dest" "$spec"
done
for whl in "$dest"/*.whl; do
    python3 - "$whl" "$dest" <<'PY'
import sys, zipfile, os
whl, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        if os.path.basename(n).startswith("libcupti.so"):
            out = os.path.join(dest, os.path.basename(n))
            with open(out, "wb") as f:
                f.write(z.read(n))
            print(out)
PY
done
