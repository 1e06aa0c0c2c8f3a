#!/usr/bin/env bash
# Runs a chart test script with a Python 3 that has PyYAML: the first `python3` on PATH when it has
# it (a pyenv build may shadow Debian's), else Debian's /usr/bin/python3 with python3-yaml
# (tools/install-deps.sh). Usage: py.sh SCRIPT.py ARGS...  or  py.sh -c CODE ARGS...
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import yaml' 2>/dev/null; then exec "$py" "$@"; fi
done
echo "FAIL: no python3 with PyYAML (apt-get install python3-yaml, or run tools/install-deps.sh)" >&2
exit 1
