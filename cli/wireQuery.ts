import { connect, type Socket } from 'node:net';
import { databaseRole } from '../config/databaseUrl';

/**
 * One statement over Postgres' wire protocol (v3) for the status-line hook, which runs on
 * every prompt: `pg` costs a cold process about as much as starting node again, this costs
 * `node:net`. It speaks what a local or trust/password setup needs: TCP or a Unix socket,
 * trust, cleartext and MD5 passwords, one extended-protocol statement with text parameters
 * and text results. Anything else (TLS, SCRAM, connection options) throws `WireUnsupported`
 * before a statement is sent, and the caller goes through `pg` instead.
 */
export class WireUnsupported extends Error {}

export class WireError extends Error {
  constructor(
    message: string,
    readonly code: string | undefined,
  ) {
    super(message);
  }
}

interface Target {
  socket: { path: string } | { host: string; port: number };
  user: string;
  password: string | undefined;
  database: string;
}

function target(url: string): Target {
  const u = new URL(url);
  if (u.protocol !== 'postgres:' && u.protocol !== 'postgresql:') throw new WireUnsupported(`scheme ${u.protocol}`);
  for (const key of u.searchParams.keys())
    if (key !== 'host' && key !== 'port' && key !== 'application_name')
      throw new WireUnsupported(`connection option ${key}`);
  if (process.env.PGSSLMODE && process.env.PGSSLMODE !== 'disable' && process.env.PGSSLMODE !== 'prefer')
    throw new WireUnsupported('PGSSLMODE');
  const user = databaseRole(url);
  const port = Number(u.searchParams.get('port') || u.port || process.env.PGPORT || 5432); // ?port wins, as in libpq
  // a socket directory comes as ?host=/dir or as the host itself, percent-encoded (%2Fdir); ?host wins, as in libpq
  const named = u.searchParams.get('host') || decodeURIComponent(u.hostname).replace(/^\[(.*)\]$/, '$1'); // [::1] -> ::1
  const host = named || process.env.PGHOST || 'localhost';
  return {
    socket: host.startsWith('/') ? { path: `${host}/.s.PGSQL.${port}` } : { host, port },
    user,
    password: u.password ? decodeURIComponent(u.password) : process.env.PGPASSWORD,
    database: decodeURIComponent(u.pathname.slice(1)) || user,
  };
}

const cstr = (s: string) => Buffer.from(`${s}\0`, 'utf8');

function message(type: string, ...parts: Buffer[]): Buffer {
  const body = Buffer.concat(parts);
  const out = Buffer.allocUnsafe(5 + body.length);
  out.write(type, 0, 'latin1');
  out.writeInt32BE(4 + body.length, 1);
  body.copy(out, 5);
  return out;
}

const int16 = (n: number) => {
  const b = Buffer.allocUnsafe(2);
  b.writeInt16BE(n);
  return b;
};
const int32 = (n: number) => {
  const b = Buffer.allocUnsafe(4);
  b.writeInt32BE(n);
  return b;
};

/** The server's messages, read in order. */
class Inbox {
  private pending: Buffer = Buffer.alloc(0);
  private queue: { type: string; body: Buffer }[] = [];
  private waiter: ((m: { type: string; body: Buffer } | Error) => void) | null = null;
  private failure: Error | null = null;

  constructor(socket: Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.pending = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
      while (this.pending.length >= 5) {
        const length = this.pending.readInt32BE(1);
        if (this.pending.length < 1 + length) break;
        this.push({ type: String.fromCharCode(this.pending[0]!), body: this.pending.subarray(5, 1 + length) });
        this.pending = this.pending.subarray(1 + length);
      }
    });
    socket.on('error', (err) => this.fail(err));
    socket.on('close', () => this.fail(new Error('the database closed the connection')));
  }

  private push(m: { type: string; body: Buffer }): void {
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = null;
      w(m);
    } else this.queue.push(m);
  }

  fail(err: Error): void {
    this.failure ??= err;
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = null;
      w(this.failure);
    }
  }

  next(): Promise<{ type: string; body: Buffer }> {
    const queued = this.queue.shift();
    if (queued) return Promise.resolve(queued);
    if (this.failure) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => {
      this.waiter = (m) => (m instanceof Error ? reject(m) : resolve(m));
    });
  }
}

function serverError(body: Buffer): WireError {
  const fields: Record<string, string> = {};
  for (let i = 0; i < body.length && body[i] !== 0;) {
    const end = body.indexOf(0, i + 1);
    fields[String.fromCharCode(body[i]!)] = body.toString('utf8', i + 1, end);
    i = end + 1;
  }
  return new WireError(fields.M ?? 'the database refused the statement', fields.C);
}

async function authenticate(socket: Socket, inbox: Inbox, t: Target): Promise<void> {
  for (;;) {
    const m = await inbox.next();
    if (m.type === 'E') throw serverError(m.body);
    if (m.type === 'Z') return;
    if (m.type !== 'R') continue; // ParameterStatus, BackendKeyData, notices
    const kind = m.body.readInt32BE(0);
    if (kind === 0) continue;
    if (kind !== 3 && kind !== 5) throw new WireUnsupported(`authentication method ${kind}`);
    if (t.password === undefined) throw new WireUnsupported('a password is asked for and none is given');
    let answer = t.password;
    if (kind === 5) {
      const { createHash } = await import('node:crypto');
      const md5 = (data: Buffer | string) => createHash('md5').update(data).digest('hex');
      answer = `md5${md5(Buffer.concat([Buffer.from(md5(t.password + t.user)), m.body.subarray(4, 8)]))}`;
    }
    socket.write(message('p', cstr(answer)));
  }
}

/** Runs `text` once with `params`; resolves to its rows (text values, null for NULL). Bounded by `timeoutMs` in all. */
export async function wireQuery(
  url: string,
  text: string,
  params: (string | number | null)[],
  timeoutMs: number,
): Promise<(string | null)[][]> {
  let t: Target;
  try {
    t = target(url);
  } catch (err) {
    // libpq and pg take forms a WHATWG URL does not (`postgres://user@/db?host=/dir`): pg reads them
    if (err instanceof WireUnsupported) throw err;
    throw new WireUnsupported(`a connection URL this client cannot read (${(err as Error).message})`);
  }
  const socket = connect('path' in t.socket ? { path: t.socket.path } : t.socket);
  socket.setNoDelay(true);
  const inbox = new Inbox(socket);
  const timer = setTimeout(() => {
    const err = new Error(`the database did not answer within ${timeoutMs} ms`);
    inbox.fail(err);
    socket.destroy();
  }, timeoutMs);
  try {
    const startup = Buffer.concat([
      int32(196608),
      cstr('user'),
      cstr(t.user),
      cstr('database'),
      cstr(t.database),
      cstr('application_name'),
      cstr('yoke-status-line'),
      cstr('client_encoding'),
      cstr('UTF8'),
      Buffer.from([0]),
    ]);
    const values = params.map((p) => {
      if (p === null) return int32(-1);
      const bytes = Buffer.from(String(p), 'utf8');
      return Buffer.concat([int32(bytes.length), bytes]);
    });
    const statement = Buffer.concat([
      message('P', cstr(''), cstr(text), int16(0)),
      message('B', cstr(''), cstr(''), int16(0), int16(params.length), ...values, int16(0)),
      message('E', cstr(''), int32(0)),
      message('S'),
    ]);
    // Without a password to give, the server either lets us in or refuses: the statement goes
    // with the startup packet (one round trip instead of two; a server that asks for a password
    // is answered by WireUnsupported before the statement is read).
    const pipelined = t.password === undefined;
    socket.write(Buffer.concat([int32(4 + startup.length), startup, ...(pipelined ? [statement] : [])]));
    await authenticate(socket, inbox, t);
    if (!pipelined) socket.write(statement);
    const rows: (string | null)[][] = [];
    let failure: WireError | null = null;
    for (;;) {
      const m = await inbox.next();
      if (m.type === 'E') failure = serverError(m.body);
      else if (m.type === 'D') {
        const row: (string | null)[] = [];
        let at = 2;
        for (let c = m.body.readInt16BE(0); c > 0; c--) {
          const length = m.body.readInt32BE(at);
          at += 4;
          row.push(length < 0 ? null : m.body.toString('utf8', at, at + length));
          at += Math.max(0, length);
        }
        rows.push(row);
      } else if (m.type === 'Z') break;
    }
    if (failure) throw failure;
    socket.end(message('X'));
    // The server closes its side only once its backend has exited, some milliseconds later:
    // waiting for that held the status-line hook's process open (8 ms of its 40 over bare node).
    // The Terminate still goes out (a pending write keeps the process alive); the close is not awaited.
    socket.unref();
    return rows;
  } finally {
    clearTimeout(timer);
    if (!socket.writableEnded) socket.destroy();
  }
}
