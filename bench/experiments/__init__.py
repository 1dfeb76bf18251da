"""The results page's harness (grid, runner, runs, stats, plots, report, and the command: results) and the other
learning experiments."""
