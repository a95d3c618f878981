#!/usr/bin/env node
// fetch.js: an HTTP GET through a konn (or upstream) proxy-server gRPC frontend, written on an
// independent gRPC stack (grpc-js + proto-loader reading our .proto at run time).
//
//   node fetch.js <frontend-unix-socket> <host:port> [path] [timeout-ms]
//
// Sends DIAL_REQ{protocol "tcp", address, random}, waits for DIAL_RSP, sends the request as DATA,
// prints the raw HTTP response (head and body) to stdout, then CLOSE_REQ and waits for CLOSE_RSP.
// Exit codes: 0 a response arrived; 1 dial error, stream error or timeout (reason on stderr);
// 2 usage.
'use strict';

const path = require('path');
const crypto = require('crypto');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const [uds, address, reqPath = '/', timeoutArg = '10000'] = process.argv.slice(2);
if (!uds || !address) {
  process.stderr.write('usage: node fetch.js <frontend-unix-socket> <host:port> [path] [timeout-ms]\n');
  process.exit(2);
}

const protoFile = path.join(__dirname, '..', '..', 'proto', 'konnectivity', 'client.proto');
const definition = protoLoader.loadSync(protoFile, {
  keepCase: true, // field names exactly as on the wire: dialRequest, connectID, ...
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});
const { ProxyService } = grpc.loadPackageDefinition(definition);

// A non-negative int63, as konnectivity-client's math/rand Int63().
const random = (crypto.randomBytes(8).readBigUInt64BE() >> 1n).toString();

const client = new ProxyService('unix:' + uds, grpc.credentials.createInsecure());
const call = client.Proxy();

let connectID = null;
let response = Buffer.alloc(0);
let printed = false;
let closeSent = false;
let finished = false;

function finish(code, message) {
  if (finished) return;
  finished = true;
  if (message) process.stderr.write('fetch.js: ' + message + '\n');
  clearTimeout(timer);
  call.end();
  call.cancel();
  client.close();
  process.exitCode = code;
}

const timer = setTimeout(() => finish(1, 'timeout after ' + timeoutArg + ' ms'), Number(timeoutArg));

// Whether `buf` holds a whole response framed by Content-Length (else we wait for CLOSE_RSP).
function complete(buf) {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return false;
  const head = buf.subarray(0, end).toString('latin1');
  const m = /\r\ncontent-length:\s*(\d+)/i.exec(head);
  return m !== null && buf.length >= end + 4 + Number(m[1]);
}

function printResponse() {
  if (printed) return;
  printed = true;
  process.stdout.write(response);
}

function sendClose() {
  if (closeSent || connectID === null) return;
  closeSent = true;
  call.write({ type: 'CLOSE_REQ', closeRequest: { connectID } });
}

call.on('data', (pkt) => {
  switch (pkt.type) {
    case 'DIAL_RSP': {
      const rsp = pkt.dialResponse;
      if (rsp.random !== random) return;
      if (rsp.error) return finish(1, 'dial failed: ' + rsp.error);
      connectID = rsp.connectID;
      const host = address;
      const request =
        `GET ${reqPath} HTTP/1.1\r\nHost: ${host}\r\nUser-Agent: konn-fetch.js\r\n` +
        'Connection: close\r\n\r\n';
      call.write({ type: 'DATA', data: { connectID, data: Buffer.from(request, 'latin1') } });
      return;
    }
    case 'DATA':
      if (pkt.data.connectID !== connectID) return;
      response = Buffer.concat([response, pkt.data.data]);
      if (complete(response)) {
        printResponse();
        sendClose();
      }
      return;
    case 'CLOSE_RSP':
      if (response.length === 0) return finish(1, 'tunnel closed without a response');
      printResponse();
      return finish(0);
    case 'DIAL_CLS':
      return finish(1, 'dial closed by the server');
    default:
      return;
  }
});

call.on('error', (err) => {
  if (finished) return;
  if (printed) return finish(0);
  finish(1, 'stream error: ' + err.message);
});

call.on('end', () => {
  if (finished) return;
  if (response.length > 0) {
    printResponse();
    return finish(0);
  }
  finish(1, 'stream ended before a response');
});

call.write({ type: 'DIAL_REQ', dialRequest: { protocol: 'tcp', address, random } });
