#!/usr/bin/env node
// halfclose.js: konn's half-close extension through the gRPC frontend, driven by grpc-js.
//
//   node halfclose.js <frontend-unix-socket> <echo host:port> <bytes> [timeout-ms]
//
// Dials with DialRequest.konnHalfClose, expects DIAL_RSP to grant it, sends <bytes> of random
// data as DATA, then KONN_CLOSE_WRITE (our side finished; we keep reading). An echo server that
// answers everything and closes after its client's EOF must then send every byte back, followed
// by CLOSE_RSP. Prints "ok <bytes> <sha256>" on success.
// Exit codes: 0 every byte came back; 1 otherwise (reason on stderr); 2 usage.
'use strict';

const path = require('path');
const crypto = require('crypto');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const [uds, address, bytesArg, timeoutArg = '20000'] = process.argv.slice(2);
if (!uds || !address || !bytesArg) {
  process.stderr.write('usage: node halfclose.js <frontend-unix-socket> <host:port> <bytes> [timeout-ms]\n');
  process.exit(2);
}
const total = Number(bytesArg);

const protoFile = path.join(__dirname, '..', '..', 'proto', 'konnectivity', 'client.proto');
const definition = protoLoader.loadSync(protoFile, {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});
const { ProxyService } = grpc.loadPackageDefinition(definition);

const random = (crypto.randomBytes(8).readBigUInt64BE() >> 1n).toString();
const payload = crypto.randomBytes(total);
const client = new ProxyService('unix:' + uds, grpc.credentials.createInsecure());
const call = client.Proxy();

let connectID = null;
const received = [];
let receivedBytes = 0;
let finished = false;

function finish(code, message) {
  if (finished) return;
  finished = true;
  if (message) process.stderr.write('halfclose.js: ' + message + '\n');
  clearTimeout(timer);
  call.end();
  call.cancel();
  client.close();
  process.exitCode = code;
}

const timer = setTimeout(
  () => finish(1, `timeout after ${timeoutArg} ms with ${receivedBytes} of ${total} bytes back`),
  Number(timeoutArg));

function sendAll() {
  const chunk = 64 * 1024;
  for (let off = 0; off < total; off += chunk) {
    call.write({ type: 'DATA', data: { connectID, data: payload.subarray(off, off + chunk) } });
  }
  call.write({ type: 'KONN_CLOSE_WRITE', closeWrite: { connectID } });
}

call.on('data', (pkt) => {
  switch (pkt.type) {
    case 'DIAL_RSP': {
      const rsp = pkt.dialResponse;
      if (rsp.random !== random) return;
      if (rsp.error) return finish(1, 'dial failed: ' + rsp.error);
      if (!rsp.konnHalfClose) return finish(1, 'half-close not granted in DIAL_RSP');
      connectID = rsp.connectID;
      sendAll();
      return;
    }
    case 'DATA':
      if (pkt.data.connectID !== connectID) return;
      received.push(pkt.data.data);
      receivedBytes += pkt.data.data.length;
      return;
    case 'KONN_CLOSE_WRITE':
      return;  // the echo server finished: CLOSE_RSP follows once the agent has both EOFs
    case 'CLOSE_RSP': {
      const back = Buffer.concat(received);
      if (!back.equals(payload)) {
        return finish(1, `echo differs: ${back.length} of ${total} bytes back`);
      }
      const digest = crypto.createHash('sha256').update(back).digest('hex');
      process.stdout.write(`ok ${back.length} ${digest}\n`);
      return finish(0);
    }
    default:
      return;
  }
});

call.on('error', (err) => finish(1, 'stream error: ' + err.message));
call.on('end', () => finish(1, `stream ended with ${receivedBytes} of ${total} bytes back`));

call.write({
  type: 'DIAL_REQ',
  dialRequest: { protocol: 'tcp', address, random, konnHalfClose: true },
});
