"""The cell vocabulary every layer above shares: cells and their canonical ids, matrix
files and their validation, scenarios and settings, selection, results, and the script
driver both the oracle and the engine run."""
