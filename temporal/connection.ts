import { readFileSync } from 'node:fs';
import type { YokeConfig } from '../config/yokeConfig';

/** TLS settings in the shape both Connection (client) and NativeConnection (worker) accept. */
export function temporalTls(config: YokeConfig['temporal']) {
  const tls = config.tls;
  if (tls === false) return undefined;
  if (tls === true) return true;
  return {
    serverNameOverride: tls.serverName,
    serverRootCACertificate: tls.ca ? readFileSync(tls.ca) : undefined,
    clientCertPair: tls.cert && tls.key ? { crt: readFileSync(tls.cert), key: readFileSync(tls.key) } : undefined,
  };
}

export function temporalConnectOptions(config: YokeConfig['temporal']) {
  return { address: config.address, tls: temporalTls(config), apiKey: config.apiKey };
}
