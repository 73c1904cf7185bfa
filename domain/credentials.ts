import { z } from 'zod';

/**
 * Issue 13: an SSH credential is a name, never a path. It names a private key file in the
 * worker's own key directory (YOKE_SSH_KEY_DIR), so a user who declares a test machine or a
 * deploy host chooses which of the worker's keys it uses, never a file elsewhere on the
 * worker's machine: no path separators, no leading dot (so neither `..` nor hidden files).
 */
export const CREDENTIAL_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;

export const CredentialName = z
  .string()
  .regex(
    CREDENTIAL_PATTERN,
    "a credential is the name of a key file in the worker's YOKE_SSH_KEY_DIR: letters, digits, . _ - (no / or \\, not starting with a dot)",
  );

export const CREDENTIAL_RECOVERY =
  "place the private key in the worker's key directory as YOKE_SSH_KEY_DIR/NAME (mode 600; default .yoke/ssh-keys) and pass --credential NAME";
