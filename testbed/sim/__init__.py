"""The discrete-event simulator of Knative on Kubernetes (DESIGN.md, backend ``sim``)."""
