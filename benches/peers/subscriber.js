// Google's Node subscriber (npm @google-cloud/pubsub), one side of the throughput benchmark.
//
// Run by `cargo bench --bench throughput` with NODE_PATH at its install
// (target/bench-peers/node/node_modules):
//
//   node subscriber.js --subscription projects/P/subscriptions/S --messages N --streams K [--exactly-once]
//   node subscriber.js --version
//
// Opens one subscription with K streaming pulls (streamingOptions.maxStreams) and flow control
// of 1,000 messages, acks every message, and stops at the N-th ack (on an exactly-once
// subscription: the N-th ack the server confirmed). Prints one line,
//
//   RESULT per_second=.. cpu_us_per_message=.. peak_rss_kb=..
//
// measured from just before the message listener is attached, which opens the streams (the
// module and the client are loaded before), to that ack, then exits. PUBSUB_EMULATOR_HOST points
// the client at the emulator.
'use strict';

const fs = require('fs');
const path = require('path');

// Against the emulator there is no metadata server to look for: without this the auth library
// probes the GCE metadata address while the streams run.
process.env.METADATA_SERVER_DETECTION ??= 'none';

// This process image's peak resident set (VmHWM), in KiB. Not process.resourceUsage().maxRSS
// (getrusage): Linux carries that over from the parent through fork and exec, so a child of a
// large benchmark process would report the parent's peak instead of its own.
function peakRssKb() {
  const line = fs
    .readFileSync('/proc/self/status', 'utf8')
    .split('\n')
    .find(l => l.startsWith('VmHWM:'));
  if (!line) throw new Error('no VmHWM in /proc/self/status');
  return Number(line.split(/\s+/)[1]);
}

// The installed version of a package: the package.json above the file it loads from.
function version(name) {
  try {
    let dir = path.dirname(require.resolve(name));
    for (;;) {
      const file = path.join(dir, 'package.json');
      if (fs.existsSync(file)) {
        const manifest = JSON.parse(fs.readFileSync(file, 'utf8'));
        if (manifest.name === name) return manifest.version;
      }
      const parent = path.dirname(dir);
      if (parent === dir) return 'unknown';
      dir = parent;
    }
  } catch {
    return 'unknown';
  }
}

function parse(argv) {
  const args = {streams: 1, exactlyOnce: false, version: false};
  for (let i = 0; i < argv.length; i++) {
    switch (argv[i]) {
      case '--version':
        args.version = true;
        break;
      case '--exactly-once':
        args.exactlyOnce = true;
        break;
      case '--subscription':
        args.subscription = argv[++i];
        break;
      case '--messages':
        args.messages = Number(argv[++i]);
        break;
      case '--streams':
        args.streams = Number(argv[++i]);
        break;
      default:
        throw new Error(`unknown argument ${argv[i]}`);
    }
  }
  return args;
}

async function main() {
  const args = parse(process.argv.slice(2));
  if (args.version) {
    console.log(
      `@google-cloud/pubsub ${version('@google-cloud/pubsub')}, ` +
        `@grpc/grpc-js ${version('@grpc/grpc-js')}, google-gax ${version('google-gax')}, ` +
        `Node ${process.version}`
    );
    return;
  }
  if (!args.subscription || !args.messages) {
    throw new Error('--subscription and --messages are required');
  }
  const {PubSub} = require('@google-cloud/pubsub');
  // The project the subscription's name gives.
  const projectId = args.subscription.split('/')[1];
  const pubsub = new PubSub({projectId});
  const subscription = pubsub.subscription(args.subscription, {
    flowControl: {maxMessages: 1000},
    streamingOptions: {maxStreams: args.streams},
  });

  let count = 0;
  let finish;
  const finished = new Promise(resolve => (finish = resolve));
  const counted = () => {
    count += 1;
    if (count === args.messages) {
      finish({cpu: process.cpuUsage(), wall: process.hrtime.bigint()});
    }
  };
  // The client retries what can be retried; an error that reaches here ends the run.
  subscription.on('error', error => {
    console.error(`subscription error: ${error.message}`);
    process.exit(1);
  });

  const cpu = process.cpuUsage();
  const wall = process.hrtime.bigint();
  if (args.exactlyOnce) {
    subscription.on('message', message => {
      // A refused ack rejects; the message comes back and is counted then.
      message.ackWithResponse().then(counted, () => {});
    });
  } else {
    subscription.on('message', message => {
      message.ack();
      counted();
    });
  }
  const end = await finished;

  const seconds = Number(end.wall - wall) / 1e9;
  const cpuUs = end.cpu.user - cpu.user + (end.cpu.system - cpu.system);
  process.stdout.write(
    `RESULT per_second=${(args.messages / seconds).toFixed(1)} ` +
      `cpu_us_per_message=${(cpuUs / args.messages).toFixed(3)} ` +
      `peak_rss_kb=${peakRssKb()}\n`,
    () => {
      // Close the streams; if the client does not let go in time, leave anyway.
      setTimeout(() => process.exit(0), 5000).unref();
      subscription.close().then(
        () => process.exit(0),
        () => process.exit(0)
      );
    }
  );
}

main().catch(error => {
  console.error(error && error.stack ? error.stack : String(error));
  process.exit(1);
});
