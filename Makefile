# Two commands set everything up on a fresh machine:
#   make run    installs (venv + Debian packages when root) and runs `foresight up`
#   make test   installs the same and runs the whole test suite
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
DEB_PACKAGES := prometheus redis-server crun runc busybox-static chromium wrk \
  buildah mmdebstrap gcc libc6-dev containerd containernetworking-plugins iptables iproute2 util-linux
PYTEST_ARGS ?=

.PHONY: run test e2e operator node cluster images deps venv debs clean

run: deps
	$(VENV)/bin/foresight up

test: deps
	@set +e; $(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing on purpose"; exit 1; fi; \
	exit $$rc

# The e2e suite alone: a real control plane built from k8s.io/kubernetes (tests/cluster/build.sh;
# the first build takes a while and is cached in ~/.cache/foresight), and the HPA fidelity table
# written to bench/results/. `make test` runs it too.
e2e: deps
	FORESIGHT_FIDELITY_OUT=bench/results/hpa_fidelity.csv $(PY) -m pytest tests/e2e $(PYTEST_ARGS)

# The CRDs, the operator and the Helm chart alone, on a real control plane (helm is built from
# its Go module by tests/cluster/build_helm.sh and cached in ~/.cache/foresight). `make test` runs them too.
operator: deps
	$(PY) -m pytest tests/operator tests/chart $(PYTEST_ARGS)

# The real node alone (tests/node: containerd, CNI, kubelet, kube-proxy joined to the control plane;
# root). `make test` runs it too.
node: deps
	$(PY) -m pytest tests/node $(PYTEST_ARGS)

# The same control plane and node for you to try: prints a kubeconfig path; Ctrl-C stops it and
# removes what the node made (interfaces, iptables chains, mounts, cgroups).
cluster: deps
	$(PY) -m tests.cluster.run_cluster

# The node's images (pause, busybox, a Debian base, foresight's app image; TRAINER=1 adds the
# trainer image with torch): OCI archives in ~/.cache/foresight/images.
images: debs
	bash tests/cluster/build_images.sh $(if $(TRAINER),--trainer)

deps: debs venv

# Debian packages the real parts need (Prometheus, Redis, crun/runc, busybox for OCI bundles,
# chromium for the dashboard test, wrk for the load benchmark; for the real node: buildah,
# mmdebstrap and gcc build its images, containerd, the CNI plugins and iptables run it). Installed only when missing
# and only as root; otherwise a note says what is missing.
debs:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else echo "not root: please install these Debian packages:$$missing"; fi; \
	fi

venv: $(VENV)/.installed

# Every dependency at the version and hash requirements/dev.txt names (the runtime, models, test
# and ray extras; its header is the command that regenerates it), then the project itself.
LOCK := requirements/dev.txt
$(VENV)/.installed: pyproject.toml $(LOCK)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip >/dev/null 2>&1 || true
	$(PIP) install -q $(if $(wildcard /opt/wheels),--find-links /opt/wheels) --require-hashes -r $(LOCK)
	$(PIP) install -q --no-deps -e .
	touch $@

clean:
	rm -rf $(VENV) build *.egg-info
