// KafkaJS against a dmq broker: `node client.js <scenario> <bootstrap> <topic>`.
// Prints one JSON object (what the scenario saw) on stdout; the Python test asserts on it.
// Exit 1 with the error on stderr when the client throws.
'use strict'
const { Kafka, logLevel, CompressionTypes } = require('kafkajs')

const [scenario, bootstrap, topic] = process.argv.slice(2)
const kafka = new Kafka({ clientId: 'dmq-kafkajs', brokers: bootstrap.split(','), logLevel: logLevel.NOTHING,
                          retry: { retries: 8 } })

// Consume from `topics` with `groupId` until `count` messages came, or `ms` passed.
async function consume (groupId, topics, count, ms, options = {}) {
  const consumer = kafka.consumer({ groupId, ...options })
  await consumer.connect()
  await consumer.subscribe({ topics, fromBeginning: true })
  const seen = []
  await new Promise((resolve) => {
    const timer = setTimeout(resolve, ms)
    consumer.run({
      eachMessage: async ({ topic, partition, message }) => {
        seen.push({ topic, partition, offset: message.offset, key: message.key && message.key.toString(),
                    value: message.value.toString(),
                    headers: Object.fromEntries(Object.entries(message.headers || {}).map(([k, v]) => [k, v.toString()])) })
        if (seen.length === count) { clearTimeout(timer); resolve() }
      }
    })
  })
  await consumer.disconnect()
  return seen
}

const scenarios = {
  // Admin, an idempotent producer with and without gzip, a consumer group and its offsets.
  async basics () {
    const admin = kafka.admin()
    await admin.connect()
    const created = await admin.createTopics({ topics: [{ topic, numPartitions: 3 }], waitForLeaders: true })
    const metadata = await admin.fetchTopicMetadata({ topics: [topic] })
    const producer = kafka.producer({ idempotent: true })
    await producer.connect()
    for (let i = 0; i < 10; i++) {
      await producer.send({ topic, compression: i % 2 ? CompressionTypes.GZIP : CompressionTypes.None,
                            messages: [{ key: `k${i}`, value: `v${i}`, headers: { source: 'kafkajs' } },
                                       { key: `k${i}`, value: `w${i}` }] })
    }
    await producer.disconnect()
    const ends = await admin.fetchTopicOffsets(topic)
    const seen = await consume(`${topic}-group`, [topic], 20, 30000)
    const committed = await admin.fetchOffsets({ groupId: `${topic}-group`, topics: [topic] })
    const groups = await admin.describeGroups([`${topic}-group`])
    await admin.deleteTopics({ topics: [topic] })
    const after = await admin.listTopics()
    await admin.disconnect()
    return {
      created,
      partitions: metadata.topics[0].partitions.map(p => [p.partitionId, p.leader, p.partitionErrorCode]),
      ends: ends.map(e => [e.partition, Number(e.low), Number(e.high)]),
      seen,
      committed: committed[0].partitions.map(p => [p.partition, Number(p.offset)]),
      group: groups.groups.map(g => [g.groupId, g.state, g.protocolType]),
      listedAfterDelete: after.includes(topic)
    }
  },

  // Transactions: committed, aborted, offsets sent in a transaction; read_committed.
  async transactions () {
    const admin = kafka.admin()
    await admin.connect()
    await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true })
    const producer = kafka.producer({ transactionalId: `${topic}-tx`, maxInFlightRequests: 1, idempotent: true })
    await producer.connect()
    let txn = await producer.transaction()
    await txn.send({ topic, messages: [{ key: 'a', value: 'committed 1' }] })
    await txn.commit()
    txn = await producer.transaction()
    await txn.send({ topic, messages: [{ key: 'b', value: 'aborted' }] })
    await txn.abort()
    txn = await producer.transaction()
    await txn.send({ topic, messages: [{ key: 'c', value: 'committed 2' }] })
    await txn.sendOffsets({ consumerGroupId: `${topic}-ctp`, topics: [{ topic, partitions: [{ partition: 0, offset: '1' }] }] })
    await txn.commit()
    await producer.disconnect()
    // Two committed records; wait a little past the second for anything that should not come.
    const committed = await consume(`${topic}-rc`, [topic], 3, 6000, { readUncommitted: false })
    const uncommitted = await consume(`${topic}-ru`, [topic], 3, 20000, { readUncommitted: true })
    const ctp = await admin.fetchOffsets({ groupId: `${topic}-ctp`, topics: [topic] })
    const ends = await admin.fetchTopicOffsets(topic)
    await admin.disconnect()
    return {
      committed: committed.map(m => m.value),
      uncommitted: uncommitted.map(m => m.value),
      ctp: ctp[0].partitions.map(p => [p.partition, Number(p.offset)]),
      // 3 records and 3 markers
      high: Number(ends[0].high)
    }
  },

  // An idempotent acks=all producer sending one record at a time while the test kills the
  // partition's leader: prints `acked <i>` for each acknowledged record, then reads the
  // topic back with a fresh group.
  async failover () {
    const count = Number(process.env.RECORDS || '300')
    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
    await producer.connect()
    for (let i = 0; i < count; i++) {
      await producer.send({ topic, acks: -1, messages: [{ value: `r${i}`, partition: 0 }] })
      process.stdout.write(`acked ${i}\n`)
      await new Promise(resolve => setTimeout(resolve, 10))
    }
    await producer.disconnect()
    const seen = await consume(`${topic}-check`, [topic], count, 60000)
    return { values: seen.map(m => m.value), offsets: seen.map(m => Number(m.offset)) }
  },

  // Admin requests that must fail come back as Kafka's errors, named.
  async errors () {
    const admin = kafka.admin()
    await admin.connect()
    const out = {}
    const attempt = async (name, fn) => {
      try {
        const value = await fn()
        out[name] = value === undefined ? 'ok' : value
      } catch (e) {
        out[name] = (e.errors || []).map(x => x.type).concat(e.type ? [e.type] : [])
      }
    }
    await attempt('badName', () => admin.createTopics({ topics: [{ topic: 'bad name!' }] }))
    await attempt('tooManyReplicas', () => admin.createTopics({ topics: [{ topic, replicationFactor: 3 }] }))
    await attempt('create', () => admin.createTopics({ topics: [{ topic, numPartitions: 2 }], waitForLeaders: true }))
    await attempt('again', () => admin.createTopics({ topics: [{ topic }], validateOnly: true }))
    await attempt('fewerPartitions', () => admin.createPartitions({ topicPartitions: [{ topic, count: 1 }] }))
    await attempt('morePartitions', () => admin.createPartitions({ topicPartitions: [{ topic, count: 3 }] }))
    await attempt('badConfig', () => admin.alterConfigs({ validateOnly: false, resources: [
      { type: 2, name: topic, configEntries: [{ name: 'cleanup.policy', value: 'shred' }] }] }))
    await attempt('acls', () => admin.describeAcls({ resourceType: 1, resourcePatternType: 1, operation: 1, permissionType: 1 }))
    const metadata = await admin.fetchTopicMetadata({ topics: [topic] })
    out.partitions = metadata.topics[0].partitions.length
    await admin.disconnect()
    return out
  }
}

scenarios[scenario]().then(
  (result) => { process.stdout.write(JSON.stringify(result) + '\n'); process.exit(0) },
  (error) => { process.stderr.write(`${error.name}: ${error.message}\n`); process.exit(1) })
