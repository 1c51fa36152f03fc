"""Data sets: synthetic generators and loaders for local files (nothing is downloaded)."""

from ._regression import RegressionData as RegressionData, sparse_regression as sparse_regression

# -- classification data (issue 6) --
