import { Client } from 'pg';

export default async function globalTeardown(): Promise<void> {
  const pid = Number(process.env.YOKE_TEST_TEMPORAL_PID);
  if (pid) {
    try {
      process.kill(-pid, 'SIGTERM');
    } catch {
      /* already gone */
    }
  }
  const server = process.env.YOKE_TEST_PG_SERVER;
  if (server) {
    const admin = new Client({ connectionString: server });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS "${process.env.YOKE_TEST_TEMPLATE}" WITH (FORCE)`);
    await admin.end();
  }
}
