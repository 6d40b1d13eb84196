"""rabbitry.consumer."""
