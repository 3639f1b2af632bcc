"""What every process shares, below every room: errors, logging, the one Kubernetes client and
the authentication and authorization reviews on it, the forecast store (Redis or memory) with
its circuit breaker, the reader's receipt clock, and typed configuration.

It imports none of the rooms (forecaster, adapter, warmpool, kubeoperator, replay, foresight):
import-linter's contracts in pyproject.toml hold it to that.
"""
