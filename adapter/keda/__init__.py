"""KEDA's external scaler (``externalscaler.ExternalScaler``, gRPC): the adapter's second front
door, for clusters where KEDA owns ``v1beta1.external.metrics.k8s.io``. Serves the same value as
the external metrics API and answers KEDA's activation question ahead of the load.

request.py parses a ScaledObject's trigger; activation.py is the pure activation step;
scaler.py answers the four calls; server.py runs them over mutual TLS."""
