"""rabbitry.policies."""
