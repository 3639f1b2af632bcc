"""foresight: predictive autoscaling for Kubernetes."""

__version__ = "0.1.0"
