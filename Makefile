# Two commands on a fresh machine: `make run` (train DQN on CartPole with an automatic plan)
# and `make test`. Both create .venv and install hetrl into it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch first, pinned: on the project's CPU machines this wheel is on local disk; elsewhere PyPI's
# build of the same release (CUDA on Linux) is used unchanged. Override with TORCH_SPEC=... .
TORCH_SPEC ?= torch==2.13.0

.PHONY: run test install install-run clean

# What `make run` needs: hetrl, and NVML's reader so that a machine with an NVIDIA GPU meters its
# energy. The test tools and the pixel envs (Triton, Ray, ONNX, ALE, EnvPool's MuJoCo assets: most
# of the download) come only with `make install` / `make test`.
$(VENV)/.installed-run: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check "$(TORCH_SPEC)"
	$(PY) -m pip install -q --disable-pip-version-check -e ".[nvml]"
	touch $@

$(VENV)/.installed: $(VENV)/.installed-run
	$(PY) -m pip install -q --disable-pip-version-check -e ".[test,pixels]"
	touch $@

install-run: $(VENV)/.installed-run

install: $(VENV)/.installed

run: install-run
	$(VENV)/bin/hetrl train dqn CartPole-v1 --steps 100000 --stop-at-return 475

test: install
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not serial"  # both cores (tests/conftest.py: SERIAL_MODULES)
	$(PY) -m pytest -q -m serial

clean:
	rm -rf $(VENV) runs
