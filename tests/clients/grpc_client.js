// Long-lived gRPC client for wayfinder's integration tests, driven over stdin/stdout: the
// Node (@grpc/grpc-js + @grpc/grpc-js-xds) twin of grpc_client.py, with the same command
// line and the same protocol.
//
//     node grpc_client.js --target xds:///echo.default.svc.cluster.local:7070 \
//         --xds-server 127.0.0.1:PORT --node-id ID [--namespace default]
//     node grpc_client.js --target 127.0.0.1:PORT        # plain channel, no xDS
//
// The packages come from tests/clients/package-lock.json, installed by
// scripts/install-test-tools into .tools/node/node_modules; run the script with
// NODE_PATH=.tools/node/node_modules (without it, that folder of this checkout is tried
// after the usual node_modules lookup).
//
// With --xds-server and --node-id the client builds an xDS bootstrap (one ADS server,
// insecure, v3) and hands it to gRPC through GRPC_XDS_BOOTSTRAP_CONFIG, set before
// @grpc/grpc-js-xds is loaded and registered. It opens one channel and keeps it (and so its
// xDS subscription) for its whole life; a test decides when calls are made by writing
// commands, one per line, on stdin:
//
//     call N [TIMEOUT_S] [KEY=VALUE ...]
//                          N unary calls to /wayfinder.test.Echo/Whoami, one after another,
//                          each with a deadline of TIMEOUT_S seconds (default 5) and the
//                          metadata KEY: VALUE (every pair; KEY is lowercased and must then be
//                          made of a-z, 0-9, '-', '_' and '.', not ending in -bin; VALUE is
//                          everything after the first '=', printable ASCII, possibly empty);
//                          prints one line:
//                          {"ok": {"NAME": count, ...}, "errors": {"CODE": count, ...},
//                          "last_error": "details" | null}
//                          (NAME: the answering backend's name; CODE: a status code name
//                          such as UNAVAILABLE, spelled as grpc.StatusCode in Python)
//     quit                 exits 0 (so do end of file on stdin, SIGTERM and SIGINT)
//
// Every command gets exactly one JSON line on stdout, formatted as Python's json.dumps
// formats it; a line it cannot parse gets {"error": "..."}. Nothing else is written to
// stdout (gRPC's own logs go to stderr).

'use strict';

const path = require('path');
const readline = require('readline');

const SERVICE_METHOD = '/wayfinder.test.Echo/Whoami';
const DEFAULT_TIMEOUT_S = 5.0;
const COMMANDS = 'call N [TIMEOUT_S] [KEY=VALUE ...] | quit';
const METADATA_KEY = /^[0-9a-z_.-]+$/;
const METADATA_VALUE = /^[!-~]*$/; // printable ASCII (no spaces: words split on them)
const PROG = path.basename(process.argv[1] || 'grpc_client.js');
const USAGE =
  `usage: ${PROG} [-h] --target TARGET [--xds-server XDS_SERVER] [--node-id NODE_ID]\n` +
  `       [--namespace NAMESPACE]\n`;
const HELP =
  USAGE +
  '\nLong-lived gRPC client for wayfinder\'s integration tests, driven over stdin/stdout.\n\n' +
  'options:\n' +
  '  -h, --help            show this help message and exit\n' +
  '  --target TARGET       xds:///NAME[:PORT] or HOST:PORT\n' +
  '  --xds-server XDS_SERVER\n' +
  '                        ADS server HOST:PORT (required for xds: targets)\n' +
  '  --node-id NODE_ID     xDS node id (required for xds: targets)\n' +
  '  --namespace NAMESPACE\n' +
  '                        node metadata NAMESPACE\n';

// Exits 2 with a usage line on stderr, as Python's argparse does.
function usageError(message) {
  process.stderr.write(`${USAGE}${PROG}: error: ${message}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const options = { '--target': 'target', '--xds-server': 'xdsServer', '--node-id': 'nodeId', '--namespace': 'namespace' };
  const args = { target: null, xdsServer: null, nodeId: null, namespace: 'default' };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '-h' || arg === '--help') {
      process.stdout.write(HELP);
      process.exit(0);
    }
    const eq = arg.indexOf('=');
    const flag = arg.startsWith('--') && eq > 0 ? arg.slice(0, eq) : arg;
    const key = Object.prototype.hasOwnProperty.call(options, flag) ? options[flag] : null;
    if (key === null) {
      usageError(`unrecognized arguments: ${arg}`);
    }
    let value;
    if (flag !== arg) {
      value = arg.slice(eq + 1);
    } else if (i + 1 < argv.length && !argv[i + 1].startsWith('-')) {
      value = argv[++i];
    } else {
      usageError(`argument ${flag}: expected one argument`);
    }
    args[key] = value;
  }
  if (args.target === null) {
    usageError('the following arguments are required: --target');
  }
  if (args.target.startsWith('xds:') && !(args.xdsServer && args.nodeId)) {
    usageError('an xds: target needs --xds-server and --node-id');
  }
  return args;
}

function bootstrap(xdsServer, nodeId, namespace) {
  return JSON.stringify({
    xds_servers: [
      {
        server_uri: xdsServer,
        channel_creds: [{ type: 'insecure' }],
        server_features: ['xds_v3'],
      },
    ],
    node: {
      id: nodeId,
      // The one difference from grpc_client.py: grpc-js-xds rejects a bootstrap whose node
      // has no locality ("locality field missing in node element"); empty is accepted.
      locality: {},
      metadata: { NAMESPACE: namespace, GENERATOR: 'grpc' },
    },
  });
}

// JSON text exactly as Python's json.dumps writes it (separators ", " and ": ",
// ensure_ascii): what grpc_client.py prints, byte for byte.
function pyJson(value) {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'string') {
    return JSON.stringify(value).replace(
      /[\u007f-\uffff]/g,
      (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'),
    );
  }
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (Array.isArray(value)) return '[' + value.map(pyJson).join(', ') + ']';
  return '{' + Object.entries(value).map(([k, v]) => pyJson(k) + ': ' + pyJson(v)).join(', ') + '}';
}

// Python's repr() of a str, as grpc_client.py puts it in its error messages.
function pyRepr(s) {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = quote;
  for (const c of s) {
    const code = c.codePointAt(0);
    if (c === quote || c === '\\') out += '\\' + c;
    else if (c === '\n') out += '\\n';
    else if (c === '\r') out += '\\r';
    else if (c === '\t') out += '\\t';
    else if (code < 0x20 || code === 0x7f) out += '\\x' + code.toString(16).padStart(2, '0');
    else out += c;
  }
  return out + quote;
}

function emit(obj) {
  process.stdout.write(pyJson(obj) + '\n');
}

// Flushes stdout, then exits with `code`.
function exit(code) {
  process.stdout.write('', () => process.exit(code));
}

// int() and float() of grpc_client.py, for the forms a test writes (no NaN).
function parseIntArg(s) {
  return /^[+-]?\d+(_\d+)*$/.test(s) ? Number(s.replace(/_/g, '')) : NaN;
}

function parseFloatArg(s) {
  if (/^[+-]?(inf|infinity)$/i.test(s)) return s.startsWith('-') ? -Infinity : Infinity;
  return /^[+-]?(\d+(_\d+)*(\.(\d+(_\d+)*)?)?|\.\d+(_\d+)*)([eE][+-]?\d+(_\d+)*)?$/.test(s)
    ? Number(s.replace(/_/g, ''))
    : NaN;
}

// [n, timeoutS, metadata pairs] of `call N [TIMEOUT_S] [KEY=VALUE ...]`'s words after
// `call`, as parse_call of grpc_client.py; null when they are malformed.
function parseCall(words) {
  if (words.length === 0) return null;
  const n = parseIntArg(words[0]);
  let rest = words.slice(1);
  let timeoutS = DEFAULT_TIMEOUT_S;
  if (rest.length > 0 && !rest[0].includes('=')) {
    timeoutS = parseFloatArg(rest[0]);
    rest = rest.slice(1);
  }
  if (Number.isNaN(n) || Number.isNaN(timeoutS) || n < 0 || !(timeoutS > 0)) return null;
  const metadata = [];
  for (const pair of rest) {
    const eq = pair.indexOf('=');
    if (eq < 0) return null;
    // Python's str.lower() and this agree on the only keys accepted: ASCII ones.
    const key = pair.slice(0, eq).toLowerCase();
    const value = pair.slice(eq + 1);
    if (!METADATA_KEY.test(key) || !METADATA_VALUE.test(value) || key.endsWith('-bin')) return null;
    metadata.push([key, value]);
  }
  return [n, timeoutS, metadata];
}

// Finds a package the way `require` does (node_modules next to this script and above, then
// NODE_PATH), falling back to .tools/node/node_modules of this checkout.
function resolvePackage(name, from) {
  const attempts = from ? [{ paths: [from] }] : [undefined, { paths: [path.join(__dirname, '..', '..', '.tools', 'node')] }];
  for (const options of attempts) {
    try {
      return require.resolve(name, options);
    } catch (e) {
      if (e.code !== 'MODULE_NOT_FOUND') throw e;
    }
  }
  process.stderr.write(
    `${PROG}: cannot find ${name}: run scripts/install-test-tools, and start this script with ` +
      "NODE_PATH set to the repository's .tools/node/node_modules\n",
  );
  process.exit(1);
}

// Until the channel exists (loading the packages takes about a second) a signal just exits.
let onSignal = () => process.exit(0);
process.on('SIGTERM', () => onSignal());
process.on('SIGINT', () => onSignal());
// The harness closed our stdout: nobody is listening any more.
process.stdout.on('error', () => process.exit(0));

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (args.xdsServer && args.nodeId) {
    // Read by grpc-js-xds when the first xds: channel is resolved; set before the package
    // is loaded so no part of it can have looked at the environment yet.
    process.env.GRPC_XDS_BOOTSTRAP_CONFIG = bootstrap(args.xdsServer, args.nodeId, args.namespace);
    delete process.env.GRPC_XDS_BOOTSTRAP; // it would take precedence
  }

  // @grpc/grpc-js is the copy that @grpc/grpc-js-xds itself resolves (its peer dependency):
  // register() installs the xds: resolver into that copy only.
  const xdsEntry = resolvePackage('@grpc/grpc-js-xds');
  const grpc = require(resolvePackage('@grpc/grpc-js', path.dirname(xdsEntry)));
  require(xdsEntry).register();

  const client = new grpc.Client(args.target, grpc.credentials.createInsecure());
  const identity = (b) => b;
  let stopping = false;

  const stop = () => {
    if (stopping) return;
    stopping = true;
    client.close();
    exit(0);
  };
  onSignal = stop;

  function whoami(timeoutS, pairs) {
    return new Promise((resolve) => {
      const deadline = Date.now() + timeoutS * 1000;
      const metadata = new grpc.Metadata();
      for (const [key, value] of pairs) metadata.add(key, value);
      client.makeUnaryRequest(
        SERVICE_METHOD,
        identity,
        identity,
        Buffer.alloc(0),
        metadata,
        { deadline },
        (err, response) => resolve({ err, response }),
      );
    });
  }

  async function call(n, timeoutS, pairs) {
    const ok = {};
    const errors = {};
    let lastError = null;
    for (let i = 0; i < n && !stopping; i++) {
      const { err, response } = await whoami(timeoutS, pairs);
      if (err) {
        const code = (typeof err.code === 'number' && grpc.status[err.code]) || 'UNKNOWN';
        errors[code] = (errors[code] || 0) + 1;
        lastError = err.details || code;
      } else {
        const name = Buffer.from(response).toString('utf8');
        ok[name] = (ok[name] || 0) + 1;
      }
    }
    return { ok, errors, last_error: lastError };
  }

  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (stopping) break;
    const words = line.split(/\s+/).filter((w) => w !== '');
    if (words.length === 0) continue;
    if (words[0] === 'quit' && words.length === 1) break;
    if (words[0] === 'call' && words.length >= 2) {
      const parsed = parseCall(words.slice(1));
      if (parsed === null) {
        emit({ error: `bad arguments: ${pyRepr(line.trim())}` });
        continue;
      }
      const result = await call(...parsed);
      if (stopping) break;
      emit(result);
      continue;
    }
    emit({ error: `unknown command: ${pyRepr(line.trim())} (expected: ${COMMANDS})` });
  }
  stop();
}

main().catch((e) => {
  process.stderr.write(`${PROG}: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
