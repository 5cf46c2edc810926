"""The package version (a leaf module: modules that record it need not import the package root)."""

__version__ = "0.1.0"
