#!/usr/bin/env bash
# Run HERE (not on the H200, which has no network): the wheels of Dask distributed and what it needs that the
# H200's Python 3.12 lacks, into .whl/ beside the notebook wheels that scripts/h200/device_call.sh installs
# (about 5 MB). jinja2, markupsafe and pyyaml are on the H200 already (reference/GPU.md) and are left out.
set -eu
DEST=${1:-.whl}
VERSION=${DISTRIBUTED_VERSION:-$(python3 -c 'import distributed; print(distributed.__version__)' 2>/dev/null || echo 2026.8.0)}
mkdir -p "$DEST"
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
  --platform any -d "$DEST" "distributed==$VERSION"
rm -f "$DEST"/jinja2-*.whl "$DEST"/markupsafe-*.whl "$DEST"/MarkupSafe-*.whl "$DEST"/pyyaml-*.whl "$DEST"/PyYAML-*.whl
ls "$DEST" | grep -Ei 'distributed|dask|msgpack|psutil|tornado|cloudpickle|toolz|partd|zict|tblib|locket|fsspec|sortedcontainers|click'
du -sh "$DEST"
