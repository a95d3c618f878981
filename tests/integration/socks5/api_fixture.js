// A minimal TLS "apiserver" for the kubectl-through-SOCKS test: answers GET /api with an
// APIVersions body and everything else with 404. Prints "listening <port>" when ready.
// Usage: node api_fixture.js <cert.pem> <key.pem>
'use strict';
const fs = require('fs');
const https = require('https');

const [cert, key] = process.argv.slice(2);
const server = https.createServer({cert: fs.readFileSync(cert), key: fs.readFileSync(key)},
    (req, res) => {
      if (req.url === '/api' || req.url.startsWith('/api?')) {
        res.writeHead(200, {'Content-Type': 'application/json'});
        res.end(JSON.stringify({
          kind: 'APIVersions',
          versions: ['v1'],
          serverAddressByClientCIDRs: [{clientCIDR: '0.0.0.0/0', serverAddress: '127.0.0.1:6443'}],
        }));
        return;
      }
      res.writeHead(404, {'Content-Type': 'application/json'});
      res.end(JSON.stringify({kind: 'Status', apiVersion: 'v1', status: 'Failure', code: 404}));
    });
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`listening ${server.address().port}\n`);
});
process.on('SIGTERM', () => process.exit(0));
