// amqplib consumer: prefetch 300, manual acks, one multiple-ack every 150 messages: the peer of
// bench/consume.py. Usage: node consume.js URL QUEUE COUNT PREFETCH ACK_EVERY -> one JSON line.
'use strict';
const amqp = require('amqplib');

async function main() {
  const [url, queue, count, prefetch, ackEvery] = process.argv.slice(2);
  const total = Number(count);
  const every = Number(ackEvery);
  const cpu0 = process.cpuUsage();
  const start = process.hrtime.bigint();
  const conn = await amqp.connect(url);
  const ch = await conn.createChannel();
  await ch.prefetch(Number(prefetch));
  let seen = 0;
  let unacked = 0;
  await new Promise((resolve) => {
    ch.consume(queue, (msg) => {
      seen++;
      unacked++;
      if (unacked >= every || seen === total) {
        ch.ack(msg, true);
        unacked = 0;
      }
      if (seen === total) resolve();
    }, { noAck: false });
  });
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  await ch.close();
  await conn.close();
  console.log(JSON.stringify({ seconds, messages: total, cpu: (cpu.user + cpu.system) / 1e6 }));
}

main().catch((err) => { console.error(String(err)); process.exit(1); });
