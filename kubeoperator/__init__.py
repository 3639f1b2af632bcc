"""The foresight operator: PredictiveAutoscaler and WarmPool custom resources (foresight.dev).

Floor 3 of the house plan. Pure steps (``spec``, ``reconcile``, ``render``) compute what the
cluster should look like from what was read; ``runner`` reads and writes through ``kube``, the
only module that talks to the API server. (Named ``kubeoperator`` because ``operator`` is a
Python standard-library module.)
"""
