"""rabbitry.publisher."""
