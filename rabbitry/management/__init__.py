"""The RabbitMQ management HTTP API: the client (``client``) and which API answers for an AMQP
URL (``endpoints``). The provisioner plans and applies through it; the Spark source reads a
super stream's partitions with it."""
