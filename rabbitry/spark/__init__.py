"""rabbitry.spark."""
