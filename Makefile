# scoretune — every target installs what it needs into .venv by itself.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
RUN_STAMP := $(VENV)/.installed-run-$(shell cksum pyproject.toml | cut -d' ' -f1)
LAB_STAMP := $(VENV)/.installed-lab-$(shell cksum pyproject.toml | cut -d' ' -f1)
TEST_STAMP := $(VENV)/.installed-test-$(shell cksum pyproject.toml | cut -d' ' -f1)
INVENTORY ?=
ANSIBLE_EXTRA ?=
PYTEST_ARGS ?=
PYTEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=15

.PHONY: setup setup-run setup-lab setup-test setup-containers images test test-rest test-all lint bench tune testbed-up testbed-down clean

## setup: scoretune with everything the tests, lint and provisioning need
setup: $(STAMP)

## setup-run: scoretune and its PPO policy (what `make tune` needs: no test, lint or Ansible tooling)
setup-run: $(RUN_STAMP)

## setup-test: scoretune, its PPO policy and the test tools (what `make test` needs: no Ansible, no Ray)
setup-test: $(TEST_STAMP)

## setup-lab: scoretune and Ansible's collections (what `make testbed-up` needs: no PyTorch, no Ray)
setup-lab: $(LAB_STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@rm -f $(VENV)/.installed-*
	@touch $@ $(RUN_STAMP) $(LAB_STAMP) $(TEST_STAMP)

$(RUN_STAMP): pyproject.toml
	@test -f $(STAMP) || { test -x $(BIN)/python || $(PYTHON) -m venv $(VENV); \
	  $(BIN)/python -m pip install --quiet -e '.[rl]' && rm -f $(VENV)/.installed-run-*; }
	@touch $@

$(TEST_STAMP): pyproject.toml
	@test -f $(STAMP) || { test -x $(BIN)/python || $(PYTHON) -m venv $(VENV); \
	  $(BIN)/python -m pip install --quiet --upgrade pip && \
	  $(BIN)/python -m pip install --quiet -e '.[test]' && rm -f $(VENV)/.installed-test-*; }
	@touch $@

$(LAB_STAMP): pyproject.toml
	@test -f $(STAMP) || { test -x $(BIN)/python || $(PYTHON) -m venv $(VENV); \
	  $(BIN)/python -m pip install --quiet -e '.[lab]' && rm -f $(VENV)/.installed-lab-*; }
	@touch $@

## test: the fast tier: units and fast integration, on two workers, the 15 slowest printed
test: setup-test
	$(PYTEST) $(PYTEST_ARGS)

## test-rest: every suite `make test` leaves out (the embedded lab, its containers, Locust, Ansible, Ray, slow)
test-rest: setup
	$(PYTEST) -m "lab or integration or slow or containers" $(PYTEST_ARGS)

## test-all: every suite
test-all: setup
	$(PYTEST) -m "" $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check .

## bench: measure and write BENCHMARKS.md
bench: setup
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/python bench/run.py --write BENCHMARKS.md

## tune: the main job, a live tuning experiment on the embedded default with the twin tuner
##   (RUNTIME=containers: the lab's nodes run real images with runc; needs root and setup-containers)
tune: setup-run
	$(BIN)/scoretune tune --embedded-default --out runs/tune --overwrite $(if $(RUNTIME),--runtime $(RUNTIME))

## setup-containers: Debian's packages the lab's container runtime uses (as root: apt-get)
CONTAINER_PACKAGES := runc docker-registry skopeo umoci mmdebstrap iproute2 tar mount
setup-containers:
	@dpkg -s $(CONTAINER_PACKAGES) >/dev/null 2>&1 || { \
	  $(if $(filter 0,$(shell id -u)),,sudo) apt-get install -y -q --no-install-recommends $(CONTAINER_PACKAGES) >/dev/null || \
	  { $(if $(filter 0,$(shell id -u)),,sudo) apt-get update -q >/dev/null && \
	    $(if $(filter 0,$(shell id -u)),,sudo) apt-get install -y -q --no-install-recommends $(CONTAINER_PACKAGES) >/dev/null; }; }
	@echo "container runtime packages: $(CONTAINER_PACKAGES)"

## images: the suite's OCI images for the container lab (mmdebstrap, pip, umoci; cached)
images: setup-run setup-containers
	$(BIN)/scoretune functions build --runtime oci

## testbed-up: a real lab from INVENTORY with Ansible, or the embedded lab without one
testbed-up: setup-lab
ifeq ($(strip $(INVENTORY)),)
	$(BIN)/scoretune testbed up
else
	$(BIN)/scoretune kube check-inventory $(INVENTORY)
	ANSIBLE_CONFIG=ansible/ansible.cfg PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/ansible-playbook -i $(INVENTORY) ansible/preflight.yml ansible/site.yml ansible/knative.yml ansible/scheduler.yml ansible/functions.yml ansible/loadgen.yml $(ANSIBLE_EXTRA)
endif

testbed-down: setup-lab
ifeq ($(strip $(INVENTORY)),)
	$(BIN)/scoretune testbed down
else
	ANSIBLE_CONFIG=ansible/ansible.cfg PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/ansible-playbook -i $(INVENTORY) ansible/teardown.yml $(ANSIBLE_EXTRA)
endif

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
