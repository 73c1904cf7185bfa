/** A bench's entry point: its figures go to stdout; a failure is printed and ends the process with 1. */
export function runBench(main: () => Promise<void>): void {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
