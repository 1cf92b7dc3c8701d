# The runtime image of a Docker-mode sub-agent: Iris and its plugins in a venv, `iris serve` as
# the default command. Everything that makes it a particular agent (AGENT_NAME, BRIDGE_PORT,
# IRIS_API_PORT, IRIS_DATA_DIR, the secrets mode...) arrives with `docker run -e`; see
# terraform/modules/agent. Built once per change of the sources by terraform/main.tf.
#
# The base only needs python3 with the venv module. Users with a registry keep the default; our
# machines cannot pull, so the tests pass an image made by `docker import` of a debootstrap tree.
ARG BASE_IMAGE=python:3.11-slim

# Stage 1: only the dependency list, so the (slow) dependency layer below is rebuilt when a
# requirement changes, not on every source edit (COPY --from is cached by content).
FROM ${BASE_IMAGE} AS requirements
COPY setup.cfg pyproject.toml /src/
COPY plugins/ /src/plugins/
RUN python3 -c "import configparser, glob, re; \
files = ['/src/setup.cfg', *sorted(glob.glob('/src/plugins/*/setup.cfg'))]; \
cfgs = [configparser.ConfigParser() for _ in files]; \
[cfg.read(f) for cfg, f in zip(cfgs, files)]; \
reqs = {r.strip() for cfg in cfgs for r in cfg.get('options', 'install_requires', fallback='').splitlines() if r.strip()}; \
reqs = sorted(r for r in reqs if re.match(r'[A-Za-z0-9._-]+', r).group().lower() != 'iris-runtime'); \
open('/requirements.txt', 'w').write('\\n'.join([*reqs, 'setuptools>=68', 'wheel']) + '\\n')"

FROM ${BASE_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    VIRTUAL_ENV=/opt/iris/venv \
    PATH=/opt/iris/venv/bin:$PATH \
    IRIS_DATA_DIR=/iris/data
RUN python3 -m venv /opt/iris/venv && mkdir -p /iris/data

# Optional offline install: wheels in build/wheelhouse/ (git-ignored) make pip use them only
# (--no-index). README.md is listed so the COPY has a source when the folder is absent.
COPY README.md build/wheelhous[e] /wheels/
COPY --from=requirements /requirements.txt /tmp/requirements.txt
RUN if ls /wheels/*.whl >/dev/null 2>&1; then \
        export PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels; \
    fi \
    && pip install -r /tmp/requirements.txt \
    && rm -rf /wheels

# The sources last: an edit rebuilds only this layer. No build isolation: setuptools and wheel
# are in the venv already, so this step needs no index.
COPY setup.cfg pyproject.toml README.md /src/
COPY iris_runtime/ /src/iris_runtime/
COPY plugins/ /src/plugins/
RUN pip install --no-deps --no-build-isolation /src /src/plugins/*/ && rm -rf /src

# /health lives on the API port (BRIDGE_PORT + 100 for a sub-agent), not on the bridge port.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s \
    CMD python3 -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('IRIS_API_PORT', '3000'), timeout=4)"

WORKDIR /iris/data
ENTRYPOINT ["iris"]
CMD ["serve"]
