// Prints the plain closing line CI reads ("N passed, N failed, N skipped") after jest's own summary.
class SummaryReporter {
  onRunComplete(_contexts, results) {
    process.stdout.write(
      `tests: ${results.numPassedTests} passed, ${results.numFailedTests} failed, ${results.numPendingTests} skipped\n`,
    );
  }
}
module.exports = SummaryReporter;
