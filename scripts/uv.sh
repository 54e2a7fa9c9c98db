# Sourced by the scripts: sets UV to a working uv command, installing uv from PyPI if missing.
if command -v uv >/dev/null 2>&1; then
  UV=(uv)
else
  if ! python3 -m uv --version >/dev/null 2>&1; then
    echo "bootstrap: installing uv from PyPI" >&2
    python3 -m pip install --quiet --disable-pip-version-check uv >&2 \
      || python3 -m pip install --quiet --disable-pip-version-check --user uv >&2
  fi
  UV=(python3 -m uv)
fi
