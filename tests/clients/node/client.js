// node-redis, in its default configuration, runs the shared client script and prints a
// transcript.
//
// Usage: node client.js PORT (with node_modules from scripts/install-client-libs on NODE_PATH).
// The same transcript must come out against a real redis-server and against Cloak
// (crates/cloak/tests/client_libs.rs compares them). Each step is one line below; its result (or
// error) is printed canonically, so adding a step is adding a line.
'use strict';

const { createClient } = require('redis');

const NAME = 'cloak-client-node';

// One printable form for what node-redis returns in either protocol.
function canonical(value) {
  if (value === null || value === undefined) return 'nil';
  if (typeof value === 'string') return JSON.stringify(value);
  if (Buffer.isBuffer(value)) return JSON.stringify(value.toString());
  if (Array.isArray(value)) return '[' + value.map(canonical).join(', ') + ']';
  if (value instanceof Map) value = Object.fromEntries(value);
  if (typeof value === 'object') {
    const keys = Object.keys(value).sort();
    return '{' + keys.map((k) => JSON.stringify(k) + ': ' + canonical(value[k])).join(', ') + '}';
  }
  return String(value);
}

async function step(name, run) {
  let result;
  try {
    result = canonical(await run());
  } catch (error) {
    result = 'error: ' + error.message;
  }
  console.log(`${name} -> ${result}`);
}

// One field of one INFO section, the way tools parse it.
async function infoField(client, section, field) {
  const text = await client.info(section);
  const line = text.split('\r\n').find((l) => l.startsWith(field + ':'));
  return line === undefined ? `no ${field}` : line.slice(field.length + 1);
}

// A full SCAN iteration: the set of keys it returned, sorted (Redis promises that set, not an
// order). The iterator yields batches of keys (one key at a time before node-redis 5).
async function scanAll(client, options) {
  const seen = new Set();
  for await (const batch of client.scanIterator(options)) {
    for (const key of [].concat(batch)) seen.add(key);
  }
  return [...seen].sort();
}

async function main() {
  // Default options except the port and the client name.
  const client = createClient({ socket: { port: Number(process.argv[2]) }, name: NAME });
  client.on('error', (error) => console.error('client error:', error.message));
  await client.connect();

  await step('ping', () => client.ping());
  await step('echo', () => client.echo('hello'));
  await step('client getname', () => client.clientGetName());
  await step('client id is positive', async () => (await client.clientId()) > 0);
  await step('client list names me', async () =>
    (await client.clientList()).filter((c) => c.name === NAME).map((c) => c.name));
  await step('client setname', () => client.clientSetName('renamed'));
  await step('client getname after', () => client.clientGetName());
  await step('client setname bad', () => client.clientSetName('has space'));
  await step('set', () => client.set('greeting', 'hello'));
  await step('get', () => client.get('greeting'));
  await step('get missing', () => client.get('missing'));
  await step('set nx existing', () => client.set('greeting', 'x', { NX: true }));
  await step('mset', () => client.mSet({ a: '1', b: '2', c: '3' }));
  await step('mget', () => client.mGet(['a', 'missing', 'c']));
  await step('exists', () => client.exists(['a', 'b', 'missing', 'a']));
  await step('del', () => client.del(['a', 'missing']));
  await step('dbsize', () => client.dbSize());
  await step('pipeline', () =>
    client.multi().set('p1', 'v1').get('p1').mGet(['p1', 'nope']).del('p1').exists('p1')
      .execAsPipeline());
  await step('info redis_mode', () => infoField(client, 'server', 'redis_mode'));
  await step('info role', () => infoField(client, 'replication', 'role'));
  await step('info loading', () => infoField(client, 'persistence', 'loading'));
  await step('info keyspace', () => infoField(client, 'keyspace', 'db0'));
  await step('config get maxclients', () => client.configGet('maxclients'));
  await step('time', async () => [].concat(await client.time()).map((part) => typeof part));
  await step('command count is positive', async () => (await client.commandCount()) > 0);
  await step('unknown command', () => client.sendCommand(['NOSUCHCOMMAND', 'x']));
  await step('wrong arity', () => client.sendCommand(['GET']));
  await step('incr', () => client.incr('counter'));
  await step('incrby', () => client.incrBy('counter', 5));
  await step('incr not an integer', () => client.incr('greeting'));
  await step('transaction', () =>
    client.multi().incr('counter').set('tx', '1').get('tx').expire('tx', 100).exec());
  await step('set ex', () => client.set('temp', 'x', { EX: 100 }));
  await step('ttl', () => client.ttl('temp'));
  await step("ttl of a transaction's key", () => client.ttl('tx'));
  await step('persist', () => client.persist('temp'));
  await step('ttl after persist', () => client.ttl('temp'));
  await step('cleanup', () => client.del(['greeting', 'b', 'c', 'counter', 'tx', 'temp']));
  await step('dbsize after cleanup', () => client.dbSize());
  const scanKeys = ['scan:hash', ...Array.from({ length: 30 }, (_, i) => `scan:${i}`)];
  await step('scan setup', async () => {
    await client.mSet(scanKeys.slice(1).map((key) => [key, 'x']));
    return client.hSet('scan:hash', 'f', 'v');
  });
  await step('scanIterator match', () => scanAll(client, { MATCH: 'scan:*' }));
  await step('scanIterator match count', () => scanAll(client, { MATCH: 'scan:1*', COUNT: 5 }));
  await step('scanIterator type', () => scanAll(client, { MATCH: 'scan:*', TYPE: 'hash' }));
  await step('scan cleanup', () => client.del(scanKeys));
  await client.close();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
