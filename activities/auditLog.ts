/** `yoke events` reads the append-only audit log exactly as the repository returns it. */
export { listEvents as readEvents, type EventView } from '../db/events';
