"""rabbitry.provisioner."""
