#!/usr/bin/env node
// A CDS poller on grpc-js (pure JavaScript gRPC, its own HTTP/2 client: Node's http2), timed as
// the SkyWalking Java agent times its polls, for skyconf's interop tests
// (crates/skyconf-cli/tests/it/interop.rs).
//
//     node cds_poller.js --addr HOST:PORT --service NAME [--interval S] [--timeout S]
//
// Every call carries a deadline of --timeout seconds (the agent's `collector.grpc_upstream_timeout`,
// 30); calls start at a fixed rate of --interval seconds (20), and a call that outlasts the interval
// is followed at once, never overlapped. The digest (`UUID`) of the last command received is
// echoed. The messages come from skyconf's own .proto files, loaded at run time by proto-loader.
//
// One JSON line per call on stdout, `t` the wall-clock time (epoch seconds) the answer arrived and
// `elapsed` the call's duration in seconds:
//     {"t", "elapsed", "uuid", "serial", "config": {key: value}}   a command
//     {"t", "elapsed", "unchanged": true}                        an empty answer
//     {"t", "elapsed", "error": CODE_NAME, "details"}            a failed call
// SIGTERM ends the program with status 0.
'use strict';

const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

function options(argv) {
  const parsed = { interval: 20, timeout: 30 };
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i].replace(/^--/, '');
    if (!['addr', 'service', 'interval', 'timeout'].includes(name) || argv[i + 1] === undefined) {
      throw new Error(`usage: cds_poller.js --addr HOST:PORT --service NAME [--interval S] [--timeout S] (at ${argv[i]})`);
    }
    parsed[name] = ['interval', 'timeout'].includes(name) ? Number(argv[i + 1]) : argv[i + 1];
  }
  if (!parsed.addr || !parsed.service) throw new Error('--addr and --service are required');
  return parsed;
}

const CODE_NAMES = Object.fromEntries(Object.entries(grpc.status).map(([name, code]) => [code, name]));
const PROTO_ROOT = path.join(__dirname, '..', '..', '..', 'crates', 'skyconf-proto', 'proto');

function client(addr) {
  const definition = protoLoader.loadSync('skywalking/v3/configuration_discovery.proto', {
    includeDirs: [PROTO_ROOT],
    keepCase: true,
    defaults: true,
  });
  const v3 = grpc.loadPackageDefinition(definition).skywalking.v3;
  return new v3.ConfigurationDiscoveryService(addr, grpc.credentials.createInsecure());
}

function fetch(stub, request, timeout) {
  return new Promise((resolve) => {
    const deadline = new Date(Date.now() + timeout * 1000);
    stub.fetchConfigurations(request, { deadline }, (error, commands) => resolve({ error, commands }));
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function main() {
  const opts = options(process.argv.slice(2));
  process.on('SIGTERM', () => process.exit(0));
  const stub = client(opts.addr);
  let uuid = '';
  let nextAt = performance.now();
  for (;;) {
    const pause = nextAt - performance.now();
    if (pause > 0) await sleep(pause);
    const started = performance.now();
    nextAt = started + opts.interval * 1000;
    const { error, commands } = await fetch(stub, { service: opts.service, uuid }, opts.timeout);
    let line;
    if (error) {
      line = { error: CODE_NAMES[error.code] || String(error.code), details: error.details };
    } else {
      const found = commands.commands.find((c) => c.command === 'ConfigurationDiscoveryCommand');
      if (found) {
        const args = Object.fromEntries(found.args.map((a) => [a.key, a.value]));
        uuid = args.UUID ?? uuid;
        const config = Object.fromEntries(
          found.args.filter((a) => a.key !== 'UUID' && a.key !== 'SerialNumber').map((a) => [a.key, a.value]));
        line = { uuid: args.UUID, serial: args.SerialNumber, config };
      } else {
        line = { unchanged: true };
      }
    }
    const elapsed = Math.round(performance.now() - started) / 1000;
    process.stdout.write(JSON.stringify({ t: Date.now() / 1000, elapsed, ...line }) + '\n');
  }
}

main().catch((e) => {
  process.stderr.write(`cds_poller.js: ${e.stack || e}\n`);
  process.exit(2);
});
