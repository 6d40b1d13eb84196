"""A message as a stream stores it, read by the stream and Spark source tests."""

# A message published over AMQP 0-9-1 by rabbitry's Publisher (message id, timestamp,
# persistent) to a stream on RabbitMQ 4.0.5, as the broker stored it (read over the stream
# protocol), with its 1 KB body cut to 3 bytes.
STORED = (
    b"\x00Sp\xc0\x06\x05A@@AC"
    b"\x00Sr\xc13\x04\xa3\nx-exchange\xa1\x00\xa3\rx-routing-key\xa1\x13bench.stream-client"
    b"\x00Ss\xc07\r\xa1 008f174aeb2e7b9ea0ad00216f000001@@@@@@@@"
    b"\x83\x00\x00\x01\xa2\x1b\xa8\xf7\xa0@@@"
    b"\x00Su\xb0\x00\x00\x00\x03xyz"
)
