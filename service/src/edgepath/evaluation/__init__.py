"""Offline evaluations of the decision engines (`edgepath eval ...`)."""
