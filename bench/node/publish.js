// amqplib confirm channel with a window of unconfirmed messages: the peer of bench/publish.py.
// Usage: node publish.js URL QUEUE COUNT WINDOW SIZE  -> one JSON line on stdout.
// WINDOW 0: no confirms; publishing waits for 'drain' when the socket buffer is full, and the
// run is timed until the queue holds every message (as the unconfirmed Python contenders are).
'use strict';
const amqp = require('amqplib');

async function unconfirmed(url, queue, total, body) {
  const conn = await amqp.connect(url);
  const ch = await conn.createChannel();
  const cpu0 = process.cpuUsage();
  const start = process.hrtime.bigint();
  for (let i = 0; i < total; i++) {
    if (!ch.publish('', queue, body, { persistent: true })) {
      await new Promise((resolve) => ch.once('drain', resolve));
    }
  }
  for (;;) {
    const ok = await ch.checkQueue(queue);
    if (ok.messageCount >= total) break;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  await ch.close();
  await conn.close();
  console.log(JSON.stringify({ seconds, messages: total, cpu: (cpu.user + cpu.system) / 1e6 }));
}

async function main() {
  const [url, queue, count, window, size] = process.argv.slice(2);
  const total = Number(count);
  const limit = Number(window);
  const body = Buffer.alloc(Number(size), 120);
  if (limit === 0) return unconfirmed(url, queue, total, body);
  const conn = await amqp.connect(url);
  const ch = await conn.createConfirmChannel();
  const latencies = new Float64Array(total);
  let inFlight = 0;
  let done = 0;
  let wake = null;
  const cpu0 = process.cpuUsage();
  const start = process.hrtime.bigint();
  for (let i = 0; i < total; i++) {
    while (inFlight >= limit) {
      await new Promise((resolve) => { wake = resolve; });
    }
    inFlight++;
    const sent = process.hrtime.bigint();
    ch.publish('', queue, body, { persistent: true }, (err) => {
      if (err) { console.error('nacked', i); process.exitCode = 1; }
      latencies[i] = Number(process.hrtime.bigint() - sent) / 1e6;
      inFlight--;
      done++;
      if (wake) { const w = wake; wake = null; w(); }
    });
  }
  while (done < total) {
    await new Promise((resolve) => { wake = resolve; });
  }
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  await ch.close();
  await conn.close();
  const sorted = Array.from(latencies).sort((a, b) => a - b);
  const pick = (p) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
  console.log(JSON.stringify({
    seconds, messages: total, cpu: (cpu.user + cpu.system) / 1e6, p50: pick(0.5), p99: pick(0.99),
  }));
}

main().catch((err) => { console.error(String(err)); process.exit(1); });
