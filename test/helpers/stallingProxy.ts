import { createServer, connect, type Server, type Socket } from 'node:net';

/**
 * A real TCP hop in front of Postgres that can stop answering: after `stall()` every byte in
 * either direction is held, which is what a hung connection looks like to the client (I2).
 */
export interface StallingProxy {
  url: string;
  stall(): void;
  /** Delivers everything held back and forwards again. */
  resume(): void;
  close(): Promise<void>;
}

export async function startStallingProxy(databaseUrl: string): Promise<StallingProxy> {
  const upstream = new URL(databaseUrl);
  const sockets: Socket[] = [];
  let stalled = false;
  const held: (() => void)[] = [];
  const server: Server = createServer((client) => {
    const server = connect(Number(upstream.port || 5432), upstream.hostname);
    sockets.push(client, server);
    const pipe = (from: Socket, to: Socket) =>
      from.on('data', (chunk) => {
        if (stalled) held.push(() => to.write(chunk));
        else to.write(chunk);
      });
    pipe(client, server);
    pipe(server, client);
    const end = () => {
      client.destroy();
      server.destroy();
    };
    client.on('error', end).on('close', end);
    server.on('error', end).on('close', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  const url = new URL(databaseUrl);
  url.hostname = '127.0.0.1';
  url.port = String(port);
  return {
    url: url.toString(),
    stall: () => {
      stalled = true;
    },
    resume: () => {
      stalled = false;
      for (const deliver of held.splice(0)) deliver();
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
