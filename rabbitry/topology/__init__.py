"""rabbitry.topology."""
