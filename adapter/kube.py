"""The adapter's client of the Kubernetes API (TokenReview, SubjectAccessReview): shared with
the warm pool, so it lives in forecaster/kubeapi.py; these names stay importable from here."""

from forecaster.kubeapi import SA_DIR, SAR_PATH, TOKEN_REVIEW_PATH, KubeAPI, KubeUnavailable

__all__ = ["SA_DIR", "SAR_PATH", "TOKEN_REVIEW_PATH", "KubeAPI", "KubeUnavailable"]
