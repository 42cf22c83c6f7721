// A js-libp2p peer for the swarmp2p interop test.
//
// It speaks what a swarmp2p node speaks: TCP + Noise + Yamux, identify, gossipsub with strict
// signing (offering /meshsub/1.1.0 among others), and Kademlia on /ipfs/kad/1.0.0 with a validator
// registered for the "swarmp2p" namespace (stock DHT nodes only accept /pk and /ipns records).
//
// Usage: node peer.mjs --connect <multiaddr of a swarmp2p node> --topic <gossip topic>
// It prints one JSON object per line on stdout and reads commands, one per line, on stdin:
//   get <key>                 -> {"event":"get", "key", "found", "value_hex"}
//   put <key> <hex value>     -> {"event":"put", "key", "ok"}
//   publish <topic> <hex>     -> {"event":"published", "topic", "recipients"}
//   peers                     -> {"event":"peers", "peers": [...]}
//   quit                      -> exits 0
// Gossip messages received on --topic are printed as {"event":"message", "topic", "from", "data_hex"}.

import './node20-polyfills.mjs'
import { createInterface } from 'node:readline'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { gossipsub } from '@libp2p/gossipsub'
import { identify } from '@libp2p/identify'
import { kadDHT, passthroughMapper } from '@libp2p/kad-dht'
import { ping } from '@libp2p/ping'
import { tcp } from '@libp2p/tcp'
import { multiaddr } from '@multiformats/multiaddr'
import { createLibp2p } from 'libp2p'

const NAMESPACE = 'swarmp2p'
const MAX_RECORD_BYTES = 1024 * 1024

function emit (obj) {
  process.stdout.write(JSON.stringify(obj) + '\n')
}

function arg (name, fallback) {
  const i = process.argv.indexOf(`--${name}`)
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback
}

const toHex = (bytes) => Buffer.from(bytes).toString('hex')
const fromHex = (text) => new Uint8Array(Buffer.from(text, 'hex'))
const utf8 = (text) => new TextEncoder().encode(text)

const connectTo = arg('connect')
const topic = arg('topic')
if (!connectTo || !topic) {
  process.stderr.write('usage: node peer.mjs --connect <multiaddr> --topic <topic>\n')
  process.exit(2)
}

const node = await createLibp2p({
  addresses: { listen: ['/ip4/127.0.0.1/tcp/0'] },
  transports: [tcp()],
  connectionEncrypters: [noise()],
  streamMuxers: [yamux()],
  services: {
    identify: identify(),
    ping: ping(),
    pubsub: gossipsub({
      globalSignaturePolicy: 'StrictSign', // must match py-libp2p's strict signing
      allowPublishToZeroTopicPeers: true,
      emitSelf: false,
      heartbeatInterval: 1000
    }),
    dht: kadDHT({
      protocol: '/ipfs/kad/1.0.0',
      clientMode: false,
      // Loopback swarm: keep 127.0.0.1 addresses (the default mapper strips private ones).
      peerInfoMapper: passthroughMapper,
      allowQueryWithZeroPeers: true,
      validators: {
        [NAMESPACE]: async (key, value) => {
          if (value.length > MAX_RECORD_BYTES) throw new Error('record too large')
        }
      },
      selectors: { [NAMESPACE]: () => 0 }
    })
  }
})

node.services.pubsub.addEventListener('message', (event) => {
  const msg = event.detail
  emit({
    event: 'message',
    topic: msg.topic,
    from: msg.type === 'signed' ? msg.from.toString() : null,
    data_hex: toHex(msg.data)
  })
})
node.services.pubsub.subscribe(topic)

const target = multiaddr(connectTo)
await node.dial(target)
// Kademlia adds the swarmp2p node to its routing table only after identify has confirmed that it
// speaks /ipfs/kad/1.0.0, which happens asynchronously after the dial. A query issued before that
// runs against zero peers and finds nothing, so "ready" waits for the routing table (at most 15 s).
const routingDeadline = Date.now() + 15000
while (node.services.dht.routingTable.size === 0 && Date.now() < routingDeadline) {
  await new Promise((resolve) => setTimeout(resolve, 50))
}
emit({
  event: 'ready',
  peer_id: node.peerId.toString(),
  routing_table_size: node.services.dht.routingTable.size,
  addrs: node.getMultiaddrs().map((a) => a.toString())
})

async function handle (line) {
  const [command, ...rest] = line.trim().split(/\s+/)
  if (command === 'get') {
    const key = rest[0]
    let value = null
    // Retry until found or 10 s have passed: one query can race a routing-table refresh.
    const deadline = Date.now() + 10000
    while (value === null && Date.now() < deadline) {
      try {
        for await (const ev of node.services.dht.get(utf8(key), { signal: AbortSignal.timeout(Math.max(1, deadline - Date.now())) })) {
          if (ev.name === 'VALUE') value = ev.value
        }
      } catch (err) {
        emit({ event: 'log', message: `get failed: ${err.message}` })
      }
      if (value === null) await new Promise((resolve) => setTimeout(resolve, 200))
    }
    emit({ event: 'get', key, found: value !== null, value_hex: value ? toHex(value) : null })
  } else if (command === 'put') {
    const [key, hex] = rest
    let ok = true
    try {
      for await (const _ of node.services.dht.put(utf8(key), fromHex(hex), { signal: AbortSignal.timeout(10000) })) { /* drain */ }
    } catch (err) {
      ok = false
      emit({ event: 'log', message: `put failed: ${err.message}` })
    }
    emit({ event: 'put', key, ok })
  } else if (command === 'publish') {
    const [t, hex] = rest
    const result = await node.services.pubsub.publish(t, fromHex(hex))
    emit({ event: 'published', topic: t, recipients: result.recipients.map((p) => p.toString()) })
  } else if (command === 'peers') {
    emit({ event: 'peers', peers: node.getPeers().map((p) => p.toString()), topic_peers: node.services.pubsub.getSubscribers(topic).map((p) => p.toString()) })
  } else if (command === 'quit') {
    await node.stop()
    process.exit(0)
  } else if (command) {
    emit({ event: 'error', message: `unknown command ${command}` })
  }
}

// Commands run one at a time, in order.
let chain = Promise.resolve()
const rl = createInterface({ input: process.stdin })
rl.on('line', (line) => { chain = chain.then(() => handle(line)).catch((err) => emit({ event: 'error', message: err.message })) })
rl.on('close', () => { chain.then(async () => { await node.stop(); process.exit(0) }) })
