"""Online and offline training of the primary-path bandit: model registry, refits, snapshots, the trainer role."""
