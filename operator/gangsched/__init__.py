"""gangsched: a Kubernetes secondary scheduler for gangs of pods."""

__version__ = "0.1.0"
