/**
 * The project permissions an owner grants (`yoke projects grant`): `claims.release` lets a steering
 * seat holder release another session's claim (C8, C11); `runs.deploy` lets an actor create runs
 * on the project; `project.read` lets an actor read a project's sessions and usage (U13), and
 * every grant implies it. Row-level security checks the same names.
 */
export const PERMISSIONS = ['claims.release', 'project.read', 'runs.deploy'] as const;
export type Permission = (typeof PERMISSIONS)[number];

export function isPermission(name: string): name is Permission {
  return (PERMISSIONS as readonly string[]).includes(name);
}
