/** @type {import('jest').Config} */
// The fault suite (npm run test:faults): kills and restarts real processes, one file at a time.
const base = require('./jest.config.js');
module.exports = {
  ...base,
  testMatch: ['<rootDir>/test/faults/**/*.fault.ts'],
  testTimeout: 600_000,
  maxWorkers: 1,
};
