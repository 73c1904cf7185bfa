// Every workflow the yoke worker runs; the worker bundles this file.
export { staleSessionSweep } from './sweep';
export { testMachineWait } from './testMachineWait';
export { testMachineCheck } from './testMachineCheck';
export { deploymentRun } from './deploymentRun';
export { sessionUsage } from './sessionUsage';
export { qaPlanExecution } from './qaPlanExecution';
