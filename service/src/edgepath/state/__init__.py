"""State stores: what the decision plane and the trainer keep between requests (see base.py)."""
