"""rabbitry.testing."""
